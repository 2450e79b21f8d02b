package main

import (
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
