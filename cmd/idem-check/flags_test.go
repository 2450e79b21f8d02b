package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

func FuzzHeaderFlag(f *testing.F) {
	for _, s := range []string{"Authorization: Bearer x", "X:", "no colon", ": v", "A: b\r\nC: d", "Ä: x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var l headerList
		if err := l.Set(s); err != nil {
			if l.h != nil {
				t.Fatalf("%q: error %v, but a header was added", s, err)
			}
			return
		}
		for name, vs := range l.h {
			if !validToken(name) {
				t.Fatalf("%q: accepted name %q", s, name)
			}
			for _, v := range vs {
				if strings.ContainsAny(v, "\r\n\x00") {
					t.Fatalf("%q: accepted value %q", s, v)
				}
			}
		}
	})
}

// Every flag of the command is named in its README (scripts and people read
// the flags there), and every `-name` the README's own
// sections (before the third-party tables) gives as a flag of idem-check
// is one.
func TestREADMENamesEveryFlag(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc, _, _ := strings.Cut(string(data), "## Third-party implementations")
	var usage bytes.Buffer
	if _, err := parseFlags([]string{"-h"}, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(usage.String(), -1) {
		flags[m[1]] = true
		if !regexp.MustCompile("(?m)(^|[\\s`])-" + regexp.QuoteMeta(m[1]) + "([\\s`]|$)").MatchString(doc) {
			t.Errorf("README.md does not name -%s", m[1])
		}
	}
	if len(flags) < 30 {
		t.Fatalf("%d flags read from -h:\n%s", len(flags), usage.String())
	}
	// Flags of idem-server, and row-name suffixes, that the README names.
	notOurs := map[string]bool{"lock-ttl": true, "request-timeout": true,
		"blank": true, "non-ascii": true, "malformed-sf": true, "two-lines": true}
	for _, m := range regexp.MustCompile("`-([a-zA-Z][a-zA-Z0-9-]*)").FindAllStringSubmatch(doc, -1) {
		if !flags[m[1]] && !notOurs[m[1]] {
			t.Errorf("README.md names -%s, which idem-check does not have", m[1])
		}
	}
}
