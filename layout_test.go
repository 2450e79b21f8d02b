package idem_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// floors is the root module's layout, from the ground up (docs/contributing.md
// draws it): a package stands on the floor of the longest prefix of its path
// here, and imports packages on its own floor or below, never above.
var floors = []struct {
	name     string
	prefixes []string
}{
	{"ground", []string{"internal/buildversion", "internal/httpfield", "internal/jitter",
		"internal/keyformat", "internal/problem", "internal/retry", "internal/scopecache",
		"internal/clientlink", "internal/serverlink"}},
	{"library", []string{"", "server", "server/memstore", "server/chaos", "server/storetest"}},
	{"product", []string{"internal/demo"}},
	{"kit", []string{"server/idemtest", "internal/testkit"}},
	{"programs", []string{"examples"}},
}

// floorOf returns the floor of the package at rel (its path in the module,
// "" for the root), and false when no prefix matches.
func floorOf(rel string) (int, bool) {
	best, floor := -1, 0
	for i, f := range floors {
		for _, p := range f.prefixes {
			if (rel == p || p == "" || strings.HasPrefix(rel, p+"/")) && len(p) > best {
				best, floor = len(p), i
			}
		}
	}
	return floor, best >= 0
}

// TestLayoutStandsOnFloors: no package of the root module imports one that
// stands above it, every package has a floor, and the retry engine imports
// nothing of net/http (the gRPC driver must be able to use it as it is).
func TestLayoutStandsOnFloors(t *testing.T) {
	t.Parallel()
	const module = "github.com/idemkit/idem"
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for {
		var p struct {
			ImportPath    string
			Imports, Deps []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		seen++
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		floor, ok := floorOf(rel)
		if !ok {
			t.Errorf("%s has no floor in the layout: give it one (layout_test.go, docs/contributing.md)", p.ImportPath)
			continue
		}
		for _, imp := range p.Imports {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			f, _ := floorOf(strings.TrimPrefix(strings.TrimPrefix(imp, module), "/"))
			if f > floor {
				t.Errorf("%s (%s) imports %s, which stands above it (%s)", p.ImportPath, floors[floor].name, imp, floors[f].name)
			}
		}
		if rel == "internal/retry" {
			for _, d := range p.Deps {
				if d == "net/http" || strings.HasPrefix(d, "net/http/") || slices.Contains([]string{"crypto/tls", "net/url"}, d) {
					t.Errorf("the retry engine depends on %s: it must hold no HTTP", d)
				}
			}
		}
	}
	if seen < 20 {
		t.Fatalf("go list gave %d packages, want the root module's (at least 20)", seen)
	}
}
