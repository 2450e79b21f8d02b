package main

import (
	"runtime/debug"
	"strings"
)

// buildVersion describes the build, from debug.ReadBuildInfo: the module's
// version (v0.1.0 for go install ...@v0.1.0, "(devel)" for a build from a
// work tree), the VCS revision when the build recorded one (with "+dirty"
// for uncommitted changes), and the Go version.
func buildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown: no build information)"
	}
	return describeBuild(info)
}

func describeBuild(info *debug.BuildInfo) string {
	parts := []string{info.Main.Version}
	if parts[0] == "" {
		parts[0] = "(devel)"
	}
	var rev string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += "+dirty"
		}
		parts = append(parts, rev)
	}
	if info.GoVersion != "" {
		parts = append(parts, info.GoVersion)
	}
	return strings.Join(parts, " ")
}
