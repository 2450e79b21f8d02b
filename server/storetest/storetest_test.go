package storetest_test

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"testing"

	"github.com/idemkit/idem/server/storetest"
)

// TestRunPassesOnReferenceStore: the suite passes on a correct store.
func TestRunPassesOnReferenceStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Fixture {
		s := newRefStore(sound)
		return storetest.Fixture{Store: s, Advance: s.advance, BreakRecord: s.breakRecord, OwnerGone: s.ownerGone}
	})
}

// flawEnv names the flaw TestFlawedStoreHelper runs the suite against.
const flawEnv = "IDEM_STORETEST_FLAW"

// TestFlawedStoreHelper runs the suite against a deliberately flawed store. It
// only does so in the child process TestRunCatchesFlawedStores starts.
func TestFlawedStoreHelper(t *testing.T) {
	f := flaw(os.Getenv(flawEnv))
	if f == sound {
		t.Skip("runs only as a child of TestRunCatchesFlawedStores")
	}
	storetest.Run(t, func(t *testing.T) storetest.Fixture {
		s := newRefStore(f)
		return storetest.Fixture{Store: s, Advance: s.advance, BreakRecord: s.breakRecord, OwnerGone: s.ownerGone}
	})
}

// TestRunCatchesFlawedStores proves the suite can fail: against each flawed
// store, run in a child test process (a failing subtest always fails its
// parent, so the failure must happen in another process), the suite fails,
// and it fails in the scenarios that the flaw breaks.
func TestRunCatchesFlawedStores(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child test processes")
	}
	cases := []struct {
		flaw flaw
		want []string // scenarios that must fail (others may fail too)
	}{
		{ignoresClaims, []string{storetest.ScenarioConcurrent, storetest.ScenarioInProgress, storetest.ScenarioSlowHandler}},
		{neverRecords, []string{storetest.ScenarioReplay, storetest.ScenarioMismatch, storetest.ScenarioDisconnect}},
		{keepsFailures, []string{storetest.ScenarioServerError, storetest.ScenarioPanic}},
		{ignoresScope, []string{storetest.ScenarioScopes}},
		{neverExpires, []string{storetest.ScenarioExpiry}},
		{neverWaits, []string{storetest.ScenarioWaitLateAnswer, storetest.ScenarioWaitOriginalFails}},
		{waitsForever, []string{storetest.ScenarioWaitClientGone}},
		{releasesLost, []string{storetest.ScenarioOutcomeUnknown}},
		{hidesWait, []string{storetest.ScenarioWaitLateAnswer, storetest.ScenarioWaitOriginalFails}},
		{ignoresMarks, []string{storetest.ScenarioMarkOwnerGone}},
		{ignoresTurns, []string{storetest.ScenarioWaitTurn}},
	}
	failLine := regexp.MustCompile(`--- FAIL: TestFlawedStoreHelper/([^/\s]+) `)
	for _, c := range cases {
		t.Run(string(c.flaw), func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestFlawedStoreHelper$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), flawEnv+"="+string(c.flaw))
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed against a store that %s:\n%s", c.flaw, out)
			}
			var failed []string
			for _, m := range failLine.FindAllSubmatch(out, -1) {
				failed = append(failed, string(m[1]))
			}
			for _, s := range c.want {
				if !slices.Contains(failed, s) {
					t.Errorf("scenario %s passed against a store that %s (failed: %v)", s, c.flaw, failed)
				}
			}
			if bytes.Contains(out, []byte("\npanic: ")) {
				t.Errorf("the suite panicked instead of failing:\n%s", out)
			}
		})
	}
}
