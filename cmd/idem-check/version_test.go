package main

import (
	"strings"
	"testing"
)

// -version prints the build and exits 0, sending nothing: no -url needed, and
// the other flags are not checked.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"-version"}, {"-version", "-duplicates", "1"}} {
		code, stdout, stderr := runCmd(t, args...)
		if code != 0 || !strings.HasPrefix(stdout, "idem-check ") || !strings.HasSuffix(stdout, "\n") || stderr != "" {
			t.Errorf("idem-check %q: exit %d, stdout %q, stderr %q; want 0 and one line \"idem-check <version>\"",
				args, code, stdout, stderr)
		}
	}
}
