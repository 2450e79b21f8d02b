package bench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// waitFor fails the test unless ch is closed within a generous bound.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10 s", what)
	}
}

// post sends one POST of foreignBody to url with key (if any) on a
// connection of its own, and returns the status, the headers and the body.
func post(t *testing.T, url, key string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(foreignBody))
	req.Close = true
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body
}

func TestConflictHandler(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(conflictHandler())
	defer srv.Close()
	status, h, body := post(t, srv.URL, "")
	if status != http.StatusConflict || !bytes.Equal(body, conflictBody) || h.Get("Retry-After") != "" {
		t.Errorf("got %d %q (Retry-After %q), want 409 %q and no Retry-After", status, body, h.Get("Retry-After"), conflictBody)
	}
}

// TestInProgressServer pins the express-idempotency behaviour: a duplicate
// while the handler runs gets a bare 409, one after it the stored response.
func TestInProgressServer(t *testing.T) {
	t.Parallel()
	ip := newInProgressServer(time.Hour)
	ip.hold = make(chan struct{})
	srv := httptest.NewServer(ip)
	defer srv.Close()
	defer ip.Close()

	claimed := ip.claimed("k1")
	type answer struct {
		status int
		body   []byte
	}
	first := make(chan answer, 1)
	go func() {
		s, _, b := post(t, srv.URL, "k1")
		first <- answer{s, b}
	}()
	waitFor(t, claimed, "the first request taking the key")
	if _, _, ok := ip.stored("k1"); ok {
		t.Fatal("a response is stored while the handler runs")
	}
	status, h, body := post(t, srv.URL, "k1")
	if status != http.StatusConflict || h.Get("Retry-After") != "" || strings.Contains(h.Get("Content-Type"), "problem") {
		t.Errorf("duplicate in flight: %d, Retry-After %q, Content-Type %q; want a bare 409", status, h.Get("Retry-After"), h.Get("Content-Type"))
	}
	if !bytes.Equal(body, inProgressBody) {
		t.Errorf("duplicate in flight: body %q, want %q", body, inProgressBody)
	}

	close(ip.hold)
	var a answer
	select {
	case a = <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request did not end within 10 s of its handler's release")
	}
	if a.status != http.StatusCreated {
		t.Fatalf("first request: %d %q, want 201", a.status, a.body)
	}
	at, stored, ok := ip.stored("k1")
	if !ok || at.IsZero() || !bytes.Equal(stored, a.body) {
		t.Fatalf("stored %q at %v (%v), want the first response %q", stored, at, ok, a.body)
	}
	status, h, body = post(t, srv.URL, "k1")
	if status != http.StatusCreated || !bytes.Equal(body, a.body) || h.Get("X-Cache") != "HIT" {
		t.Errorf("duplicate after: %d %q (X-Cache %q), want the stored 201 %q", status, body, h.Get("X-Cache"), a.body)
	}
	// A request without a key runs the handler.
	if status, _, body := post(t, srv.URL+"?other", ""); status != http.StatusCreated || bytes.Equal(body, a.body) {
		t.Errorf("a request without a key: %d %q, want a new 201", status, body)
	}
}

func TestUnavailableServer(t *testing.T) {
	t.Parallel()
	s := newUnavailableServer()
	defer s.Close()
	want := []int{http.StatusCreated, http.StatusServiceUnavailable, http.StatusCreated}
	for i, step := range []func(){func() {}, s.down, func() { _ = s.up() }} {
		step()
		status, h, _ := post(t, s.URL(), "")
		if status != want[i] || h.Get("Retry-After") != "" {
			t.Errorf("step %d: %d (Retry-After %q), want %d without Retry-After", i, status, h.Get("Retry-After"), want[i])
		}
	}
}

// TestRefusingServer checks that a refusing server refuses connections while
// down, serves again on the same port when up, and that no other server of
// the process takes its port meanwhile.
func TestRefusingServer(t *testing.T) {
	t.Parallel()
	s, err := newRefusingServer()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if status, _, _ := post(t, s.URL(), ""); status != http.StatusCreated {
		t.Fatalf("up: %d, want 201", status)
	}
	s.down()
	req, _ := http.NewRequest(http.MethodPost, s.URL(), bytes.NewReader(foreignBody))
	tr := newBaseTransport()
	defer tr.CloseIdleConnections()
	if resp, err := tr.RoundTrip(req); !errors.Is(err, syscall.ECONNREFUSED) {
		if resp != nil {
			resp.Body.Close()
		}
		t.Fatalf("down: %v, want connection refused", err)
	}
	other, err := newRefusingServer()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if other.port == s.port {
		t.Fatalf("another server took port %d during the outage", s.port)
	}
	if err := s.up(); err != nil {
		t.Fatal(err)
	}
	if status, _, _ := post(t, s.URL(), ""); status != http.StatusCreated {
		t.Fatalf("up again: %d, want 201", status)
	}
}

// retrier is a retry layer for the tests, without waits: it sends each
// request up to max times while retry says so, rewinding the body.
type retrier struct {
	next  http.RoundTripper
	max   int
	retry func(resp *http.Response, err error) bool
}

func (r retrier) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	for i := 1; ; i++ {
		attempt := req.Clone(req.Context())
		attempt.Body = io.NopCloser(bytes.NewReader(body))
		resp, err := r.next.RoundTrip(attempt)
		if i == r.max || !r.retry(resp, err) {
			return resp, err
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
}

// retryClient is a ForeignClient of the tests built on retrier.
func retryClient(max int, retry func(*http.Response, error) bool) ForeignClient {
	return ForeignClient{Name: "test", New: func(next http.RoundTripper) *http.Client {
		return &http.Client{Transport: retrier{next: next, max: max, retry: retry}}
	}}
}

func status(code int) func(*http.Response, error) bool {
	return func(resp *http.Response, err error) bool { return err == nil && resp.StatusCode == code }
}

// TestForeignRowCounts runs rows with a retry layer whose decisions do not
// depend on time, and checks what the rows count.
func TestForeignRowCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := ForeignConfig{Ops: 6}
	anyFailure := func(resp *http.Response, err error) bool { return err != nil || resp.StatusCode >= 500 }
	cases := []struct {
		name          string
		sc            ForeignScenario
		client        ForeignClient
		ops, requests int
		completed     int
		answers       map[string]int
	}{
		{"conflict, not retried", ForeignScenario{Kind: ForeignConflict}, retryClient(5, anyFailure),
			6, 6, 6, map[string]int{"409": 6}},
		{"conflict, polled three times", ForeignScenario{Kind: ForeignConflict}, retryClient(3, status(http.StatusConflict)),
			6, 18, 6, map[string]int{"409": 6}},
		// The outage outlasts the row: every operation ends on the 503.
		{"outage, 503", ForeignScenario{Kind: ForeignOutage, Outage: time.Hour}, retryClient(4, anyFailure),
			6, 24, 0, map[string]int{"503": 6}},
		{"sustained, 503", SustainedOutage(40, 100*time.Millisecond), retryClient(3, anyFailure),
			4, 12, 0, map[string]int{"503": 4}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			res, err := runForeignRow(ctx, cfg, c.sc, c.client, 1)
			if err != nil {
				t.Fatal(err)
			}
			if res.Ops != c.ops || res.Requests != c.requests || res.Completed != c.completed {
				t.Errorf("ops %d, requests %d, completed %d; want %d, %d, %d", res.Ops, res.Requests, res.Completed, c.ops, c.requests, c.completed)
			}
			if len(res.Answers) != len(c.answers) {
				t.Errorf("answers %v, want %v", res.Answers, c.answers)
			}
			for k, n := range c.answers {
				if res.Answers[k] != n {
					t.Errorf("answers %v, want %v", res.Answers, c.answers)
				}
			}
			if c.completed == 0 && (res.OutcomeP50 != Never || res.OutcomeP99 != Never) {
				t.Errorf("time to outcome %v / %v with nothing completed, want ∞", res.OutcomeP50, res.OutcomeP99)
			}
			if c.completed == c.ops && (res.OutcomeP99 != res.AnswerP99) {
				t.Errorf("time to outcome p99 %v, time to answer p99 %v: want equal when all completed", res.OutcomeP99, res.AnswerP99)
			}
		})
	}

	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		refused := func(_ *http.Response, err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
		res, err := runForeignRow(ctx, cfg, ForeignScenario{Kind: ForeignRefused, Outage: time.Hour}, retryClient(2, refused), 1)
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests != 12 || res.Completed != 0 || len(res.Answers) != 1 {
			t.Errorf("requests %d, completed %d, answers %v; want 12, 0, one kind of error", res.Requests, res.Completed, res.Answers)
		}
		for a := range res.Answers {
			if !strings.HasPrefix(a, "error: ") || !strings.Contains(a, "connection refused") {
				t.Errorf("answer %q, want a refused connection", a)
			}
		}
	})
}

// TestForeignDuplicates checks the in-progress rows' counting: a client that
// returns the bare 409 completes nothing; one that polls until the stored
// answer completes every duplicate, after that answer existed.
func TestForeignDuplicates(t *testing.T) {
	t.Parallel()
	cfg := ForeignConfig{Ops: 5}

	t.Run("409 returned", func(t *testing.T) {
		t.Parallel()
		ip := newInProgressServer(time.Hour)
		ip.hold = make(chan struct{})
		var conflicts atomic.Int64
		var once sync.Once
		// Release the handlers once every duplicate has had its 409.
		client := &http.Client{Transport: observer{next: countingTransport{newBaseTransport()}, seen: func(resp *http.Response) {
			if resp.StatusCode == http.StatusConflict && conflicts.Add(1) == int64(cfg.Ops) {
				once.Do(func() { close(ip.hold) })
			}
		}}}
		pr, err := runDuplicates(context.Background(), client, ip, cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		res := ForeignResult{}
		summarizeForeign(&res, pr.dups, func(i int, _ foreignOp) bool { return pr.late[i] >= 0 }, pr.late)
		if res.Ops != 5 || res.Requests != 5 || res.Completed != 0 || res.Answers["409"] != 5 || pr.setupFailures != 0 {
			t.Errorf("ops %d, requests %d, completed %d, answers %v, originals failed %d; want 5, 5, 0, 5 × 409, 0",
				res.Ops, res.Requests, res.Completed, res.Answers, pr.setupFailures)
		}
	})

	t.Run("polled to the answer", func(t *testing.T) {
		t.Parallel()
		ip := newInProgressServer(time.Hour)
		ip.hold = make(chan struct{})
		var conflicts atomic.Int64
		var once sync.Once
		// A 409 waits until the handlers are released (after every
		// duplicate's first 409), then is retried at once.
		released := make(chan struct{})
		poll := func(resp *http.Response, err error) bool {
			if err != nil || resp.StatusCode != http.StatusConflict {
				return false
			}
			if conflicts.Add(1) == int64(cfg.Ops) {
				once.Do(func() { close(ip.hold); close(released) })
			}
			select {
			case <-released:
			case <-time.After(10 * time.Second):
			}
			return true
		}
		client := retryClient(1000, poll).New(countingTransport{newBaseTransport()})
		pr, err := runDuplicates(context.Background(), client, ip, cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		res := ForeignResult{}
		summarizeForeign(&res, pr.dups, func(i int, _ foreignOp) bool { return pr.late[i] >= 0 }, pr.late)
		if res.Ops != 5 || res.Completed != 5 || res.Answers["201"] != 5 || res.Requests < 10 || pr.setupFailures != 0 {
			t.Errorf("ops %d, requests %d, completed %d, answers %v, originals failed %d; want 5, at least 10, 5, 5 × 201, 0",
				res.Ops, res.Requests, res.Completed, res.Answers, pr.setupFailures)
		}
		for i, l := range pr.late {
			if l < 0 {
				t.Errorf("duplicate %d: %v after the answer existed, want it counted", i, l)
			}
		}
	})
}

// observer calls seen with every response that passes.
type observer struct {
	next http.RoundTripper
	seen func(*http.Response)
}

func (o observer) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := o.next.RoundTrip(req)
	if err == nil {
		o.seen(resp)
	}
	return resp, err
}

func TestSummarizeForeign(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	ops := []foreignOp{
		{took: ms(10), requests: 1, status: 201},
		{took: ms(20), requests: 3, status: 503},
		{took: ms(30), requests: 2, err: errors.New("boom")},
		{took: ms(40), requests: 1, status: 201},
	}
	late := []time.Duration{ms(5), -1, -1, ms(7)}
	res := ForeignResult{}
	summarizeForeign(&res, ops, func(i int, o foreignOp) bool { return o.status == 201 }, late)
	if res.Ops != 4 || res.Requests != 7 || res.Completed != 2 || res.RequestsPerOp() != 1.75 || res.CompletedShare() != 0.5 {
		t.Errorf("ops %d, requests %d, completed %d (%.2f per op, %.2f done); want 4, 7, 2, 1.75, 0.50",
			res.Ops, res.Requests, res.Completed, res.RequestsPerOp(), res.CompletedShare())
	}
	if want := map[string]int{"201": 2, "503": 1, "error: boom": 1}; len(res.Answers) != 3 ||
		res.Answers["201"] != 2 || res.Answers["503"] != 1 || res.Answers["error: boom"] != 1 {
		t.Errorf("answers %v, want %v", res.Answers, want)
	}
	if res.OutcomeP99 != Never || res.AnswerP99 != ms(40) {
		t.Errorf("outcome p99 %v, answer p99 %v; want ∞ and 40ms", res.OutcomeP99, res.AnswerP99)
	}
	if res.LateP50 != ms(5) || res.LateP99 != ms(7) {
		t.Errorf("after the answer existed %v / %v, want 5ms / 7ms (the completed only)", res.LateP50, res.LateP99)
	}
}

func TestErrorLabel(t *testing.T) {
	t.Parallel()
	if got := errorLabel(errors.New("plain")); got != "plain" {
		t.Errorf("errorLabel(plain) = %q", got)
	}
	// failsafe-go's error, built by the policy itself.
	rt := ForeignClients()[2].New(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Body: http.NoBody, Request: r}, nil
	}))
	req, _ := http.NewRequest(http.MethodGet, "http://in-memory.invalid/", nil)
	_, err := rt.Do(req)
	if err == nil {
		t.Fatal("failsafe-go returned no error after its retries")
	}
	if got, want := errorLabel(err), "retries exceeded (last result: a 503 response)"; got != want {
		t.Errorf("errorLabel = %q, want %q", got, want)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestForeignConfigs(t *testing.T) {
	t.Parallel()
	for _, quick := range []bool{false, true} {
		cfg := paramsFor(quick).foreign
		kinds := map[ForeignKind]int{}
		for _, sc := range cfg.Scenarios {
			if err := sc.validate(); err != nil {
				t.Errorf("quick %v, %q: %v", quick, sc.Name, err)
			}
			kinds[sc.Kind]++
			if (sc.Kind == ForeignOutage || sc.Kind == ForeignRefused) && sc.Outage != 3*time.Second {
				t.Errorf("quick %v, %q: outage %v, want 3s", quick, sc.Name, sc.Outage)
			}
		}
		// The full run has each in-progress and outage scenario with 20
		// operations and with 50; the quick run with 20 only.
		per := 2
		if quick {
			per = 1
		}
		if kinds[ForeignConflict] != 1 || kinds[ForeignInProgress] != 2*per || kinds[ForeignOutage] != per ||
			kinds[ForeignRefused] != per || kinds[ForeignSustained] != 1 {
			t.Errorf("quick %v: scenarios by kind %v", quick, kinds)
		}
		names := map[string]bool{}
		for _, sc := range cfg.Scenarios {
			if names[sc.Name] {
				t.Errorf("quick %v: two scenarios named %q", quick, sc.Name)
			}
			names[sc.Name] = true
			n := cfg.Ops
			if sc.Ops > 0 {
				n = sc.Ops
			}
			if sc.Kind != ForeignSustained && !strings.Contains(sc.Name, strconv.Itoa(n)+" ") {
				t.Errorf("quick %v: %q does not say its %d operations", quick, sc.Name, n)
			}
		}
	}
	if _, err := RunForeign(context.Background(), ForeignConfig{Ops: 1, Scenarios: []ForeignScenario{{Kind: ForeignInProgress}}}, nil); err == nil ||
		!strings.Contains(err.Error(), "Handler") {
		t.Errorf("an in-progress scenario without a handler time: %v, want an error naming Handler", err)
	}
}

// TestForeignReport checks the verdicts and the table of section 6 on rows
// made up for the purpose.
func TestForeignReport(t *testing.T) {
	t.Parallel()
	cfg := DefaultForeign()
	byKind := func(k ForeignKind) ForeignScenario {
		for _, sc := range cfg.Scenarios {
			if sc.Kind == k {
				return sc
			}
		}
		t.Fatalf("no scenario of kind %d", k)
		return ForeignScenario{}
	}
	rows := []ForeignResult{
		{Scenario: byKind(ForeignConflict), Client: "idem", Ops: 50, Completed: 50, Requests: 50, AnswerP99: 30 * time.Millisecond},
		{Scenario: byKind(ForeignConflict), Client: "go-retryablehttp", Ops: 50, Completed: 50, Requests: 50},
		{Scenario: byKind(ForeignInProgress), Client: "idem", Ops: 50, Completed: 22, Requests: 500, LateP99: 800 * time.Millisecond},
		{Scenario: byKind(ForeignOutage), Client: "idem", Ops: 50, Completed: 47, Requests: 150},
		{Scenario: byKind(ForeignRefused), Client: "idem", Ops: 50, Completed: 12, Requests: 250},
		{Scenario: byKind(ForeignSustained), Client: "idem", Ops: 500, Requests: 600},
	}
	got := strings.Join(foreignTargets(rows), "\n")
	for _, want := range []string{
		"plain 409: 1.00 requests per operation, time to answer p99 30ms (target 1 request, under 100ms: met)",
		"22 of 50 duplicates completed, after the answer existed p99 800ms",
		"every request answered 503, then healthy: 47 of 50 operations completed, 94% (target ≥ 95%: **not met**)",
		"every connection refused, then healthy: 12 of 50 operations completed, 24% (target ≥ 95%: **not met**)",
		"1.20 attempts per operation (target ≤ 1.5: met)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("targets lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "go-retryablehttp") {
		t.Errorf("targets judge a peer:\n%s", got)
	}
	md := (&Report{Foreign: rows, ForeignCfg: cfg}).Markdown()
	if !strings.Contains(md, "## 6. A server that does not implement keys") || strings.Count(md, "\n| ") < len(rows)+1 {
		t.Errorf("section 6 missing or short:\n%s", md)
	}
}
