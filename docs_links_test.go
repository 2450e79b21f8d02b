package idem_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The Markdown files a reader meets first: every relative link in them must
// point at a file that exists, and every #fragment at a heading of it.
var linkedDocs = []string{"README.md", "docs/*.md", "bench/README.md", "cmd/*/README.md", "server/*/README.md"}

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
	mdFence   = regexp.MustCompile("(?ms)^```.*?^```")
)

// slug is the anchor GitHub gives a heading: lower case, spaces to hyphens,
// every character but letters, digits, '-' and '_' dropped.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(t *testing.T, path string, cache map[string]map[string]bool) map[string]bool {
	if a, ok := cache[path]; ok {
		return a
	}
	a := map[string]bool{}
	if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(path, ".md") {
		text := mdFence.ReplaceAllString(string(b), "")
		for _, m := range mdHeading.FindAllStringSubmatch(text, -1) {
			s := slug(m[1])
			for n := 1; a[s]; n++ { // GitHub numbers repeated headings
				s = slug(m[1]) + "-" + string(rune('0'+n))
			}
			a[s] = true
		}
	}
	cache[path] = a
	return a
}

func TestDocLinks(t *testing.T) {
	var files []string
	for _, g := range linkedDocs {
		m, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 3 {
		t.Fatalf("found only %v: is the test running at the repository root?", files)
	}
	cache := map[string]map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := mdFence.ReplaceAllString(string(b), "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue // the network is not this test's business
			}
			target, frag, _ := strings.Cut(link, "#")
			path := f
			if target != "" {
				path = filepath.Join(filepath.Dir(f), target)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %q: no file %s", f, link, path)
					continue
				}
			}
			if frag != "" && !anchors(t, path, cache)[frag] {
				t.Errorf("%s: link %q: %s has no heading with the anchor #%s", f, link, path, frag)
			}
		}
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"1. Client: which attempts may be repeated": "1-client-which-attempts-may-be-repeated",
		"Time-outs with a key":                      "time-outs-with-a-key",
		"`WithKey` and §3":                          "withkey-and-3",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestReadmeIsShort: the README is read in five minutes (what, install, a
// snippet each side, where to go next): at most 150 lines, the rest on pages
// of docs/ it links to.
func TestReadmeIsShort(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 150 {
		t.Errorf("README.md has %d lines, want at most 150: move a section to a page of docs/ and link it", n)
	}
}
