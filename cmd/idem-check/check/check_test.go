package check

import (
	"context"
	"encoding/xml"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
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
	if rep.Sent > rep.Budget || rep.Reads > rep.ReadBudget {
		t.Errorf("sent %d requests and took %d effect counts, more than the %d and %d announced", rep.Sent, rep.Reads, rep.Budget, rep.ReadBudget)
	}
	for _, o := range Overshoots(rep) {
		t.Errorf("past its share of the bound: %s", o)
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

// rowsOfOneMethod are the row IDs of one method of a run with every
// setting given, in order, for the flawed server's body (three fields).
var rowsOfOneMethod = []string{
	"missing-key", "first-execution", "replay-status", "replay-body", "replay-headers", "replay-marker",
	"replay-effect", "mismatch", "mismatch-original-replays",
	"mismatch-field-amount", "mismatch-field-currency", "mismatch-field-ref", "mismatch-query",
	"in-progress", "in-progress-prefer-wait", "in-progress-lease", "5xx-not-stored", "scope",
	"invalid-key-too-long", "invalid-key-blank", "invalid-key-non-ascii", "invalid-key-malformed-sf",
	"invalid-key-two-lines", "two-key-lines", "quoted-key", "quoted-same-as-raw", "expiry", "replay-after", "retention-window",
	"chaos-lost-response", "chaos-concurrent", "chaos-lost-then-concurrent",
}

// issue28Rows are the rows added, or judged anew, for issue 28: a flaw of
// that issue fails these rows only, which is how it passed before them.
var issue28Rows = map[string]bool{
	"mismatch-original-replays": true, "mismatch-field-amount": true, "mismatch-field-currency": true,
	"mismatch-field-ref": true, "mismatch-query": true, "in-progress-prefer-wait": true, "in-progress-lease": true,
	"two-key-lines": true, "replay-after": true, "retention-window": true,
}

// boundSlack is how far past its announced Time a run may end: what a
// scenario the bound cut short takes to see its context end and return (a
// request cancelled, a proxy closed). Generous: a loaded machine.
const boundSlack = 5 * time.Second

// wantWithinBound wants the run of cfg on s, reported in rep, to have kept to
// the bound PlanBound announced before it: no more requests reached the
// server, no more effect counts were taken, no longer waits, and no longer
// a run (Config.Now counts the waits, see flawedServer.clock) than it said,
// (runReport wants each scenario within its own share).
func wantWithinBound(t *testing.T, s *flawedServer, cfg Config, rep *Report) {
	t.Helper()
	b, err := PlanBound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	received, counts, slept := int(s.received.Load()), int(s.counts.Load()), time.Duration(s.slept.Load())
	if rep.Budget != b.Requests || rep.TimeBound != b.Time {
		t.Errorf("the report's bound (%d requests, %s) is not the announced %+v", rep.Budget, rep.TimeBound, b)
	}
	if received > b.Requests || rep.Sent != received {
		t.Errorf("the server got %d requests, the report says %d sent, %d announced", received, rep.Sent, b.Requests)
	}
	if counts > b.Reads || rep.Reads != counts || rep.ReadBudget != b.Reads {
		t.Errorf("the server answered %d effect counts, the report says %d taken of %d, %d announced", counts, rep.Reads, rep.ReadBudget, b.Reads)
	}
	for _, o := range Overshoots(rep) {
		t.Errorf("past its share of the bound: %s", o)
	}
	if slept > b.Wait {
		t.Errorf("waited %s on purpose, %s announced", slept, b.Wait)
	}
	if rep.Duration > b.Time+boundSlack {
		t.Errorf("the run took %s (its waits included), %s announced", rep.Duration, b.Time)
	}
}

func TestFlawlessServerPassesEveryRow(t *testing.T) {
	s := newFlawedServer(t)
	cfg := s.config()
	rep := runReport(t, cfg)
	wantWithinBound(t, s, cfg, rep)
	var ids, want []string
	for _, row := range rep.Rows {
		ids = append(ids, row.Method+" "+row.ID)
	}
	for _, m := range []string{"POST", "PUT"} {
		for _, id := range rowsOfOneMethod {
			want = append(want, m+" "+id)
		}
	}
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Errorf("rows %v, want %v", ids, want)
	}
	wantAll(t, rep, Pass)
	if rep.Failed() {
		t.Error("Failed() with no FAIL row")
	}
}

// A flawCase is a flaw of the flawed server and the verdicts it gives the
// rows it can explain. A row named "PUT id" is of that method only; any
// other is wanted on both methods.
type flawCase struct {
	flaw flaw
	want map[string]Verdict
	// issue28 says the flaw is one of issue 28's: only its rows catch it.
	issue28 bool
}

// worst is the verdict of the case's rows that fails a run the soonest:
// FAIL, else WARN, else SKIP, else PASS.
func (tc flawCase) worst() Verdict {
	worst := Pass
	for _, v := range tc.want {
		switch {
		case v == Fail:
			return Fail
		case v == Warn, v == Skip && worst == Pass:
			worst = v
		}
	}
	return worst
}

// rows are the "METHOD id" of the case's rows with verdict v, sorted.
func (tc flawCase) rows(v Verdict) []string {
	var out []string
	for name, w := range tc.want {
		if w != v {
			continue
		}
		if _, _, ok := strings.Cut(name, " "); ok {
			out = append(out, name)
			continue
		}
		out = append(out, "POST "+name, "PUT "+name)
	}
	slices.Sort(out)
	return out
}

func flawCases() []flawCase {
	fail := func(ids ...string) map[string]Verdict { return verdicts(Fail, ids...) }
	invalid := fail("invalid-key-too-long", "invalid-key-blank", "invalid-key-non-ascii",
		"invalid-key-malformed-sf", "invalid-key-two-lines", "two-key-lines")
	return []flawCase{
		{flaw: flawMissingKey500, want: fail("missing-key")},
		{flaw: flawKeyOptional, want: verdicts(Warn, "missing-key")},
		{flaw: flawValidKey500, want: fail("first-execution", "quoted-key")},
		{flaw: flawMarkFirst, want: fail("first-execution", "replay-marker")},
		{flaw: flawReplayStatus, want: fail("replay-status")},
		{flaw: flawReplayBody, want: fail("replay-body")},
		{flaw: flawReplayHeaders, want: fail("replay-headers")},
		{flaw: flawReplayCookie, want: verdicts(Warn, "replay-headers")},
		{flaw: flawNoMarker, want: verdicts(Warn, "replay-marker")},
		{flaw: flawRunsAgain, want: fail("replay-effect", "chaos-lost-response", "chaos-lost-then-concurrent")},
		{flaw: flawIgnoresBody, want: fail("mismatch", "mismatch-field-amount", "mismatch-field-currency", "mismatch-field-ref")},
		{flaw: flawConcurrentTwice, want: fail("in-progress", "in-progress-prefer-wait", "in-progress-lease", "chaos-concurrent")},
		{flaw: flawNoLock, want: fail("in-progress", "in-progress-prefer-wait", "in-progress-lease", "chaos-concurrent")},
		{flaw: flawStuckAfter5xx, want: fail("5xx-not-stored")},
		{flaw: flawStores5xx, want: verdicts(Warn, "5xx-not-stored")},
		{flaw: flawGlobalKeys, want: fail("scope")},
		{flaw: flawGlobalNoMarker, want: fail("scope")},
		{flaw: flawBadKey500, want: invalid},
		{flaw: flawQuoted500, want: fail("quoted-key")},
		{flaw: flawQuotedDistinct, want: verdicts(Warn, "quoted-same-as-raw")},
		{flaw: flawNeverExpires, want: fail("expiry")},

		{flaw: flawFingerprintSubset, want: fail("mismatch-field-currency", "mismatch-field-ref"), issue28: true},
		{flaw: flawIgnoresQuery, want: fail("mismatch-query"), issue28: true},
		{flaw: flawDropAfterMismatch, want: fail("mismatch-original-replays"), issue28: true},
		{flaw: flawShortRetention, want: fail("replay-after", "retention-window"), issue28: true},
		{flaw: flawLeaseExpires, want: fail("in-progress-lease"), issue28: true},
		{flaw: flawFirstOfTwoLines, want: map[string]Verdict{"two-key-lines": Fail, "invalid-key-two-lines": Warn}, issue28: true},
		// RFC 7240 §2 lets a server ignore a preference: a WARN, which
		// fails only a strict run (TestStrictFailsOnEachWarnOrSkipFlaw).
		{flaw: flawIgnoresPrefer, want: verdicts(Warn, "in-progress-prefer-wait"), issue28: true},
		{flaw: flawKeyIgnoredOnPUT, want: map[string]Verdict{"PUT replay-effect": Fail, "PUT mismatch": Fail,
			"PUT chaos-concurrent": Fail, "POST replay-effect": Pass, "POST in-progress": Pass}},
		{flaw: flawIgnoresSlow, want: verdicts(Skip, "in-progress", "in-progress-prefer-wait", "in-progress-lease")},
		{flaw: flawIgnoresFail, want: verdicts(Skip, "5xx-not-stored")},
	}
}

// Each flaw of an idempotency layer turns its rows (and only rows it can
// explain) to FAIL, or to WARN or SKIP where the spec allows the behaviour
// or the run cannot judge it.
func TestEachFlawBreaksItsRow(t *testing.T) {
	for _, tc := range flawCases() {
		t.Run(string(tc.flaw), func(t *testing.T) {
			t.Parallel()
			s := newFlawedServer(t, tc.flaw)
			cfg := s.config()
			rep := runReport(t, cfg)
			wantWithinBound(t, s, cfg, rep)
			for name, v := range tc.want {
				methods := []string{"POST", "PUT"}
				id := name
				if m, rest, ok := strings.Cut(name, " "); ok {
					methods, id = []string{m}, rest
				}
				for _, m := range methods {
					row := rep.RowOf(m, id)
					if row == nil {
						t.Fatalf("no row %s %s", m, id)
					}
					if row.Verdict != v {
						t.Errorf("%s %s: %s (%s), want %s", m, id, row.Verdict, row.Got, v)
					}
					if (v == Fail || v == Warn) && len(row.Evidence) == 0 {
						t.Errorf("%s %s: %s without evidence", m, id, row.Verdict)
					}
				}
			}
			for _, row := range rep.Rows {
				if tc.issue28 && row.Verdict == Fail && !issue28Rows[row.ID] {
					t.Errorf("%s %s: %s (%s): a row from before issue 28 fails this flaw", row.Method, row.ID, row.Verdict, row.Got)
				}
			}
			if rep.Failed() != (tc.worst() == Fail) {
				t.Errorf("Failed() = %v with the rows %v", rep.Failed(), tc.want)
			}
			if t.Failed() {
				t.Logf("report:\n%s", reportText(rep))
			}
		})
	}
}

func verdicts(v Verdict, ids ...string) map[string]Verdict {
	m := map[string]Verdict{}
	for _, id := range ids {
		m[id] = v
	}
	return m
}

// A flaw that only WARNs or SKIPs (the spec allows it, or the run cannot
// judge it) passes a run, which reports the WARN or SKIP on its rows; with
// -strict it fails the run (the command's exit status 1 is Failed()), and
// the rows that fail it, named in the table and in the JUnit file, are its
// rows and no others. So a server that ignores Prefer: wait, or the slow and
// fail headers, no longer passes a strict run.
func TestStrictFailsOnEachWarnOrSkipFlaw(t *testing.T) {
	n := 0
	for _, tc := range flawCases() {
		worst := tc.worst()
		if worst != Warn && worst != Skip {
			continue
		}
		n++
		t.Run(string(tc.flaw), func(t *testing.T) {
			t.Parallel()
			s := newFlawedServer(t, tc.flaw)
			cfg := s.config()
			rep := runReport(t, cfg)
			if rep.Failed() {
				t.Errorf("not strict: Failed() with %v", rep.Counts())
			}
			want := append(tc.rows(Warn), tc.rows(Skip)...)
			slices.Sort(want)
			if got := notPassing(rep); !slices.Equal(got, want) {
				t.Errorf("not strict: rows not PASS %v, want %v", got, want)
			}
			if t.Failed() {
				t.Logf("report, not strict:\n%s", reportText(rep))
			}

			cfg = newFlawedServer(t, tc.flaw).config() // a fresh server: its own clock
			cfg.Strict = true
			rep = runReport(t, cfg)
			if !rep.Failed() {
				t.Fatalf("strict: not Failed() with %v", rep.Counts())
			}
			if got := notPassing(rep); !slices.Equal(got, want) {
				t.Errorf("strict: rows not PASS %v, want %v", got, want)
			}
			text := reportText(rep)
			for _, name := range want {
				m, id, _ := strings.Cut(name, " ")
				v := rep.RowOf(m, id).Verdict
				if !regexp.MustCompile(`(?m)^` + string(v) + ` +` + regexp.QuoteMeta(name) + ` `).MatchString(text) {
					t.Errorf("strict: the table has no line %s %s", v, name)
				}
			}
			if !strings.Contains(text, "(strict: a WARN or a SKIP fails the run)") {
				t.Error("strict: the table does not say a WARN or a SKIP fails the run")
			}
			var junit strings.Builder
			if err := rep.WriteJUnit(&junit); err != nil {
				t.Fatal(err)
			}
			if got := junitFailures(t, junit.String()); !slices.Equal(got, want) {
				t.Errorf("strict JUnit failures %v, want %v", got, want)
			}
			if t.Failed() {
				t.Logf("report:\n%s", text)
			}
		})
	}
	if n < 8 {
		t.Errorf("%d flaws only WARN or SKIP, want the 8 known", n)
	}
}

// notPassing are the "METHOD id" of rep's rows that are not PASS, sorted.
func notPassing(rep *Report) []string {
	var out []string
	for _, row := range rep.Rows {
		if row.Verdict != Pass {
			out = append(out, row.Method+" "+row.ID)
		}
	}
	slices.Sort(out)
	return out
}

// junitFailures are the "METHOD id" of the failed test cases of a JUnit
// file, sorted; each failure's message says the verdict behind it.
func junitFailures(t *testing.T, doc string) []string {
	t.Helper()
	var suite struct {
		Failures int `xml:"failures,attr"`
		Cases    []struct {
			Name      string `xml:"name,attr"`
			Classname string `xml:"classname,attr"`
			Failure   *struct {
				Message string `xml:"message,attr"`
			} `xml:"failure"`
		} `xml:"testcase"`
	}
	if err := xml.Unmarshal([]byte(doc), &suite); err != nil {
		t.Fatalf("JUnit: %v", err)
	}
	var out []string
	for _, c := range suite.Cases {
		if c.Failure == nil {
			continue
		}
		if !strings.HasPrefix(c.Failure.Message, "WARN (strict): ") && !strings.HasPrefix(c.Failure.Message, "SKIP (strict): ") {
			t.Errorf("JUnit failure of %s: message %q does not say the verdict", c.Name, c.Failure.Message)
		}
		out = append(out, strings.TrimPrefix(c.Classname, "idem-check ")+" "+c.Name)
	}
	if suite.Failures != len(out) {
		t.Errorf("JUnit failures=%d, %d failed cases", suite.Failures, len(out))
	}
	slices.Sort(out)
	return out
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
	b, err := PlanBound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// For each of the two methods: 1 missing-key, 2 replay, 3 mismatch, 2×(3
	// fields + the query), 2+2 in-progress, 3×(1+60) lease (three operations
	// when duplicates overtake the slow one), 2 5xx, 3 scope, 5
	// invalid keys, 3 two-key-lines, 3 quoted, and the retention schedule:
	// 2 expiry, 2 replay-after, 1+13 window retries (1s, 2s, ... 2048s and
	// 3599s, within an hour's TTL); then 2 operations of (1+2) + 4 + (1+4)
	// in chaos mode.
	perMethod := 1 + 2 + 3 + 8 + 4 + 3*61 + 2 + 3 + 5 + 3 + 3 + (2 + 2 + 14) + 2*(3+4+5)
	reads := 3 + 2 + 2 + 3*2 + 2 + 3*2*2
	wait := 2 * (flawedTTL + time.Second) // the expiry row's wait, the longest of each method's schedule
	if b.Requests != 2*perMethod || b.Reads != 2*reads || b.Wait != wait || b.Time != defaultTimeAllowance+wait {
		t.Errorf("PlanBound = %+v, want %d requests, %d reads, %s waits", b, 2*perMethod, 2*reads, wait)
	}
	if requests, r, _ := Plan(cfg); requests != b.Requests || r != b.Reads {
		t.Errorf("Plan = %d, %d; PlanBound %+v", requests, r, b)
	}
	rep := runReport(t, cfg)
	if rep.Sent == 0 || rep.Reads == 0 {
		t.Errorf("sent %d requests, took %d effect counts", rep.Sent, rep.Reads)
	}
	wantWithinBound(t, s, cfg, rep)
}

// The wait budget decides which retention rows run: none waits past it, and
// the window ends where it does.
func TestWaitBudget(t *testing.T) {
	s := newFlawedServer(t, flawShortRetention)
	cfg := s.config()
	cfg.Methods = nil
	cfg.TTL = 24 * time.Hour
	cfg.ReplayAfter = 12 * time.Hour
	cfg.MaxWait = 2 * time.Minute
	var slept time.Duration
	cfg.Sleep = func(_ context.Context, d time.Duration) error {
		slept += d
		s.advance(d)
		return nil
	}
	b, err := PlanBound(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if b.Wait != 2*time.Minute {
		t.Errorf("planned wait %s, want the 2m budget", b.Wait)
	}
	rep := runReport(t, cfg)
	if slept > cfg.MaxWait {
		t.Errorf("waited %s, past the budget %s", slept, cfg.MaxWait)
	}
	for id, want := range map[string]string{"expiry": "past the wait budget of 2m0s", "replay-after": "past the wait budget"} {
		if row := rep.Row(id); row.Verdict != Skip || !strings.Contains(row.Got, want) {
			t.Errorf("%s: %s (%s), want SKIP saying %q", id, row.Verdict, row.Got, want)
		}
	}
	// A day's documented retention, records gone after a second: the
	// window's first retry finds it.
	if row := rep.Row("retention-window"); row.Verdict != Fail || !strings.Contains(row.Got, "gone 1s after") {
		t.Errorf("retention-window: %s (%s), want FAIL at 1s", row.Verdict, row.Got)
	}
}

// The run ends within its time bound, however slow the server: rows it had
// no time for are skipped, none is failed for it, and no request past the
// bound is sent.
func TestTimeBoundHolds(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(300 * time.Millisecond):
		}
		w.WriteHeader(http.StatusBadRequest)
	}))
	defer slow.Close()
	cfg := Config{URL: slow.URL, Body: []byte(`{"a":1}`), MaxTime: time.Second, Transport: slow.Client().Transport}
	b, err := PlanBound(cfg)
	if err != nil || b.Time != time.Second {
		t.Fatalf("PlanBound = %+v, %v", b, err)
	}
	start := time.Now()
	rep := runReport(t, cfg)
	if took := time.Since(start); took > b.Time+500*time.Millisecond {
		t.Errorf("the run took %s, bound %s", took, b.Time)
	}
	if rep.Sent > rep.Budget || rep.Sent > 5 {
		t.Errorf("sent %d requests in a second of 300ms answers (budget %d)", rep.Sent, rep.Budget)
	}
	n := rep.Counts()
	if n[Skip] == 0 || !strings.Contains(reportText(rep), "time bound (1s, -max-time) was reached") {
		t.Errorf("no row says the bound cut it:\n%s", reportText(rep))
	}
	for _, row := range rep.Rows {
		if row.Verdict == Fail {
			t.Errorf("%s: FAIL (%s) in a run the bound cut short", row.ID, row.Got)
		}
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
