package buildversion

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestDescribe(t *testing.T) {
	t.Parallel()
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}
	for _, tc := range []struct {
		stamped string
		info    debug.BuildInfo
		want    string
	}{
		{"", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.1.0"}}, "v0.1.0 go1.26.0"},
		{"", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: vcs},
			"(devel) 0123456789ab+dirty go1.26.0"},
		{"", debug.BuildInfo{}, "(devel)"},
		// make dist: the stamp replaces the module version, which a
		// workspace build leaves at (devel).
		{"v0.1.0-3-g0123456", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}},
			"v0.1.0-3-g0123456 go1.26.0"},
		{"v0.2.0", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.1.0"}, Settings: vcs},
			"v0.2.0 0123456789ab+dirty go1.26.0"},
	} {
		if got := describe(tc.stamped, &tc.info); got != tc.want {
			t.Errorf("describe(%q, %+v) = %q, want %q", tc.stamped, tc.info.Main, got, tc.want)
		}
	}
}

// A test binary has build information: String describes it, with the stamp
// first when there is one.
func TestString(t *testing.T) {
	t.Parallel()
	if got := String(""); got == "" || strings.HasPrefix(got, "(unknown") {
		t.Errorf(`String("") = %q, want the test binary's build`, got)
	}
	if got := String("v9.9.9"); !strings.HasPrefix(got, "v9.9.9 ") {
		t.Errorf(`String("v9.9.9") = %q, want it to start with the stamp`, got)
	}
}
