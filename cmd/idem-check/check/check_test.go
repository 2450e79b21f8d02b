package check

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// runReport runs cfg with a deadline and fails the test on a Config error.
func runReport(t *testing.T, cfg Config) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.Sent > rep.Budget {
		t.Errorf("sent %d requests, more than the %d announced", rep.Sent, rep.Budget)
	}
	return rep
}

func reportText(rep *Report) string {
	var b strings.Builder
	_ = rep.WriteText(&b, true)
	return b.String()
}

// wantAll wants every row of rep to have verdict v.
func wantAll(t *testing.T, rep *Report, v Verdict) {
	t.Helper()
	for _, row := range rep.Rows {
		if row.Verdict != v {
			t.Errorf("%s: %s (%s), want %s", row.ID, row.Verdict, row.Got, v)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", reportText(rep))
	}
}

// allRows are the row IDs of a run with every setting given, in order.
var allRows = []string{
	"missing-key", "first-execution", "replay-status", "replay-body", "replay-headers", "replay-marker",
	"replay-effect", "mismatch", "in-progress", "in-progress-prefer-wait", "5xx-not-stored", "scope",
	"invalid-key-too-long", "invalid-key-blank", "invalid-key-non-ascii", "invalid-key-malformed-sf",
	"invalid-key-two-lines", "quoted-key", "quoted-same-as-raw", "expiry",
	"chaos-lost-response", "chaos-concurrent", "chaos-lost-then-concurrent",
}

func TestFlawlessServerPassesEveryRow(t *testing.T) {
	s := newFlawedServer(t)
	rep := runReport(t, s.config())
	var ids []string
	for _, row := range rep.Rows {
		ids = append(ids, row.ID)
	}
	if strings.Join(ids, " ") != strings.Join(allRows, " ") {
		t.Errorf("rows %v, want %v", ids, allRows)
	}
	wantAll(t, rep, Pass)
	if rep.Failed() {
		t.Error("Failed() with no FAIL row")
	}
}

// Each flaw of an idempotency layer turns its row (and only rows it can
// explain) to FAIL, or to WARN where the spec allows the behaviour.
func TestEachFlawBreaksItsRow(t *testing.T) {
	invalid := []string{"invalid-key-too-long", "invalid-key-blank", "invalid-key-non-ascii",
		"invalid-key-malformed-sf", "invalid-key-two-lines"}
	tests := []struct {
		flaw    flaw
		verdict Verdict
		rows    []string
	}{
		{flawMissingKey500, Fail, []string{"missing-key"}},
		{flawKeyOptional, Warn, []string{"missing-key"}},
		{flawValidKey500, Fail, []string{"first-execution", "quoted-key"}},
		{flawMarkFirst, Fail, []string{"first-execution", "replay-marker"}},
		{flawReplayStatus, Fail, []string{"replay-status"}},
		{flawReplayBody, Fail, []string{"replay-body"}},
		{flawReplayHeaders, Fail, []string{"replay-headers"}},
		{flawReplayCookie, Warn, []string{"replay-headers"}},
		{flawNoMarker, Warn, []string{"replay-marker"}},
		{flawRunsAgain, Fail, []string{"replay-effect", "chaos-lost-response", "chaos-lost-then-concurrent"}},
		{flawIgnoresBody, Fail, []string{"mismatch"}},
		{flawConcurrentTwice, Fail, []string{"in-progress", "in-progress-prefer-wait", "chaos-concurrent"}},
		{flawNoLock, Fail, []string{"in-progress", "in-progress-prefer-wait", "chaos-concurrent"}},
		{flawStuckAfter5xx, Fail, []string{"5xx-not-stored"}},
		{flawStores5xx, Warn, []string{"5xx-not-stored"}},
		{flawGlobalKeys, Fail, []string{"scope"}},
		{flawGlobalNoMarker, Fail, []string{"scope"}},
		{flawBadKey500, Fail, invalid},
		{flawQuoted500, Fail, []string{"quoted-key"}},
		{flawQuotedDistinct, Warn, []string{"quoted-same-as-raw"}},
		{flawNeverExpires, Fail, []string{"expiry"}},
	}
	for _, tc := range tests {
		t.Run(string(tc.flaw), func(t *testing.T) {
			t.Parallel()
			s := newFlawedServer(t, tc.flaw)
			rep := runReport(t, s.config())
			for _, id := range tc.rows {
				row := rep.Row(id)
				if row == nil {
					t.Fatalf("no row %s", id)
				}
				if row.Verdict != tc.verdict {
					t.Errorf("%s: %s (%s), want %s", id, row.Verdict, row.Got, tc.verdict)
				}
				if len(row.Evidence) == 0 {
					t.Errorf("%s: %s without evidence", id, row.Verdict)
				}
			}
			if rep.Failed() != (tc.verdict == Fail) {
				t.Errorf("Failed() = %v with the rows %s", rep.Failed(), tc.verdict)
			}
			if t.Failed() {
				t.Logf("report:\n%s", reportText(rep))
			}
		})
	}
}

func TestRowsWithoutTheirSettingSkip(t *testing.T) {
	s := newFlawedServer(t)
	cfg := s.config()
	cfg.OtherPrincipal, cfg.Slow, cfg.Fail, cfg.TTL, cfg.Effect, cfg.Chaos = nil, nil, nil, 0, nil, false
	cfg.Body = []byte("not json")
	rep := runReport(t, cfg)
	for _, id := range []string{"replay-effect", "mismatch", "in-progress", "in-progress-prefer-wait",
		"5xx-not-stored", "scope", "expiry"} {
		if row := rep.Row(id); row == nil || row.Verdict != Skip || !strings.Contains(row.Got, "give") {
			t.Errorf("%s: %+v, want SKIP saying what to give", id, row)
		}
	}
	if rep.Row("chaos-concurrent") != nil {
		t.Error("chaos rows without Chaos")
	}
}

// A server that does not answer fails the rows, and the run stays within
// its budget.
func TestUnreachableServerFails(t *testing.T) {
	s := newFlawedServer(t)
	cfg := s.config()
	s.Close()
	rep := runReport(t, cfg)
	if !rep.Failed() {
		t.Fatalf("no FAIL against a closed server:\n%s", reportText(rep))
	}
	if row := rep.Row("first-execution"); row.Verdict != Fail {
		t.Errorf("first-execution %s (%s), want FAIL", row.Verdict, row.Got)
	}
}

func TestPlanMatchesBudget(t *testing.T) {
	s := newFlawedServer(t)
	cfg := s.config()
	requests, reads, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// 24 base requests plus 2 operations of (1+2) + 4 + (1+4) in chaos mode.
	if requests != 24+2*(3+4+5) || reads != 3+2+2+3*2*2 {
		t.Errorf("Plan = %d requests, %d reads", requests, reads)
	}
	rep := runReport(t, cfg)
	if rep.Budget != requests || rep.Sent == 0 {
		t.Errorf("Budget %d, Sent %d; Plan said %d", rep.Budget, rep.Sent, requests)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "URL is empty"},
		{Config{URL: "ftp://x/y"}, "absolute http"},
		{Config{URL: "/relative"}, "absolute http"},
		{Config{URL: "http://x", TTL: -time.Second}, "negative"},
		{Config{URL: "http://x", Duplicates: 33}, "at most 32"},
		{Config{URL: "http://x", Operations: 21}, "at most 20"},
	} {
		_, err := Run(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
}

func TestDeriveOtherBody(t *testing.T) {
	for in, want := range map[string]string{
		`{"customer":"c","amount":100}`: `{"amount":101,"customer":"c"}`,
		`{"name":"x"}`:                  `{"idem_check_variant":1,"name":"x"}`,
		`[1,2]`:                         ``,
		`text`:                          ``,
		``:                              ``,
	} {
		if got := string(deriveOtherBody([]byte(in))); got != want {
			t.Errorf("deriveOtherBody(%q) = %q, want %q", in, got, want)
		}
	}
}

// brokenEffect cannot count.
type brokenEffect struct{}

func (brokenEffect) Count(context.Context) (int64, error) { return 0, errors.New("count store down") }
func (brokenEffect) String() string                       { return "a broken count" }

// A count that fails makes its rows SKIP with the reason, never a verdict
// drawn from a count of zero.
func TestEffectFailureSkips(t *testing.T) {
	s := newFlawedServer(t)
	cfg := s.config()
	cfg.Effect = brokenEffect{}
	rep := runReport(t, cfg)
	for _, id := range []string{"replay-effect", "chaos-lost-response", "chaos-concurrent", "chaos-lost-then-concurrent"} {
		if row := rep.Row(id); row.Verdict != Skip || !strings.Contains(row.Got, "count store down") {
			t.Errorf("%s: %s (%s), want SKIP with the count's error", id, row.Verdict, row.Got)
		}
	}
	if row := rep.Row("in-progress"); row.Verdict != Pass {
		t.Errorf("in-progress: %s (%s): the responses alone should judge it", row.Verdict, row.Got)
	}
}
