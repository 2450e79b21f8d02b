package main

import "github.com/idemkit/idem/internal/buildversion"

// version is the release version that make dist stamps into the binary
// (-ldflags "-X main.version=..."); empty in every other build.
var version string

// buildVersion is what -version prints after the command's name: the stamped
// version or the module's, the VCS revision when recorded, and the Go
// version (see buildversion.String).
func buildVersion() string { return buildversion.String(version) }
