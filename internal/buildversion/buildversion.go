// Package buildversion is the one description of a build that idem's commands
// (idem-server, idem-check) print for -version.
//
// make dist stamps the release version into each command with
// -ldflags "-X main.version=...", and the command passes that string to
// String; a build without the stamp (go install, go build, go run) passes ""
// and String reads the version from the build information instead.
package buildversion

import (
	"runtime/debug"
	"strings"
)

// String describes the build: the stamped version, or without one the main
// module's version (v0.1.0 for go install ...@v0.1.0, "(devel)" for a build
// from a work tree); then the VCS revision when the build recorded one (with
// "+dirty" for uncommitted changes), and the Go version.
func String(stamped string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if stamped != "" {
			return stamped
		}
		return "(unknown: no build information)"
	}
	return describe(stamped, info)
}

func describe(stamped string, info *debug.BuildInfo) string {
	parts := []string{stamped}
	if parts[0] == "" {
		parts[0] = info.Main.Version
	}
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
