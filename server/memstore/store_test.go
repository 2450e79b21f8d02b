package memstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
)

func request(key, fp string) server.Request {
	return server.Request{Scope: "alice", Key: key, Fingerprint: fp, TTL: time.Hour, LockTTL: 30 * time.Second}
}

// respond returns a RunFunc that counts its calls and answers resp.
func respond(calls *int, resp *server.Response, keep bool) server.RunFunc {
	return func(context.Context) (*server.Response, bool) {
		*calls++
		return resp, keep
	}
}

func sampleResponse() *server.Response {
	return &server.Response{
		Status: http.StatusCreated,
		Header: http.Header{
			"Content-Type": {"application/json"},
			"X-Multi":      {"one", "two", ""},
			"x-noncanon":   {"kept as is"},
		},
		Body: []byte{0, 1, 2, 0xff, '\n', 0},
	}
}

func mustDo(t *testing.T, s *Store, req server.Request, run server.RunFunc) server.Result {
	t.Helper()
	res, err := s.Do(context.Background(), req, run)
	if err != nil {
		t.Fatalf("Do(%q): %v", req.Key, err)
	}
	return res
}

func TestDoOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		first       server.Request
		firstKeep   bool
		second      server.Request
		wantOutcome server.Outcome
		wantRuns    int
	}{
		{"same fingerprint replays", request("k", "fp"), true, request("k", "fp"), server.OutcomeReplayed, 1},
		{"other fingerprint mismatches", request("k", "fp"), true, request("k", "other"), server.OutcomeMismatch, 1},
		{"released claim runs again", request("k", "fp"), false, request("k", "fp"), server.OutcomeExecuted, 2},
		{"released claim accepts other fingerprint", request("k", "fp"), false, request("k", "other"), server.OutcomeExecuted, 2},
		{"other key runs", request("k", "fp"), true, request("k2", "fp"), server.OutcomeExecuted, 2},
		{"other scope runs", request("k", "fp"), true, server.Request{Scope: "bob", Key: "k", Fingerprint: "fp", TTL: time.Hour}, server.OutcomeExecuted, 2},
		{"empty scope is its own scope", request("k", "fp"), true, server.Request{Key: "k", Fingerprint: "fp", TTL: time.Hour}, server.OutcomeExecuted, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := New()
			runs := 0
			res := mustDo(t, s, tt.first, respond(&runs, sampleResponse(), tt.firstKeep))
			if res.Outcome != server.OutcomeExecuted {
				t.Fatalf("first outcome = %v, want executed", res.Outcome)
			}
			res = mustDo(t, s, tt.second, respond(&runs, sampleResponse(), true))
			if res.Outcome != tt.wantOutcome {
				t.Errorf("second outcome = %v, want %v", res.Outcome, tt.wantOutcome)
			}
			if runs != tt.wantRuns {
				t.Errorf("runs = %d, want %d", runs, tt.wantRuns)
			}
			if tt.wantOutcome == server.OutcomeMismatch && res.Response != nil {
				t.Errorf("mismatch carries a response: %+v", res.Response)
			}
		})
	}
}

func TestReplayIsByteExactAndUnaliased(t *testing.T) {
	t.Parallel()
	s := New()
	orig := sampleResponse()
	runs := 0
	res := mustDo(t, s, request("k", "fp"), respond(&runs, orig, true))
	if res.Response != orig {
		t.Errorf("executed result does not carry the handler's response")
	}
	// The caller scribbles over what it handed to the store.
	orig.Body[0] = 'X'
	orig.Header["X-Multi"][0] = "changed"
	orig.Header.Set("X-New", "added")

	want := sampleResponse()
	replay := mustDo(t, s, request("k", "fp"), respond(&runs, nil, true))
	if replay.Outcome != server.OutcomeReplayed || !reflect.DeepEqual(replay.Response, want) {
		t.Fatalf("replay = %v %+v, want %+v", replay.Outcome, replay.Response, want)
	}
	// A replay's receiver scribbles too; the next replay is still exact.
	replay.Response.Body[1] = 'Y'
	replay.Response.Header["X-Multi"] = append(replay.Response.Header["X-Multi"][:1], "appended")
	again := mustDo(t, s, request("k", "fp"), respond(&runs, nil, true))
	if !reflect.DeepEqual(again.Response, want) {
		t.Fatalf("second replay = %+v, want %+v", again.Response, want)
	}
	if runs != 1 {
		t.Errorf("runs = %d, want 1", runs)
	}
}

func TestReplayKeepsNilAndEmpty(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		resp *server.Response
	}{
		{"nil header and body", &server.Response{Status: 204}},
		{"empty header and body", &server.Response{Status: 200, Header: http.Header{}, Body: []byte{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := New()
			runs := 0
			mustDo(t, s, request("k", "fp"), respond(&runs, tt.resp, true))
			got := mustDo(t, s, request("k", "fp"), respond(&runs, nil, true))
			if !reflect.DeepEqual(got.Response, tt.resp) {
				t.Errorf("replay = %#v, want %#v", got.Response, tt.resp)
			}
		})
	}
}

func TestInProgress(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		lockTTL   time.Duration
		elapsed   time.Duration
		dupFP     string
		want      server.Outcome
		wantAfter time.Duration
	}{
		{"remaining lease", 30 * time.Second, 10 * time.Second, "fp", server.OutcomeInProgress, 20 * time.Second},
		{"lease nearly over: at least 1s", 30 * time.Second, 29*time.Second + 500*time.Millisecond, "fp", server.OutcomeInProgress, time.Second},
		{"past the lease the claim is still held", 30 * time.Second, time.Hour, "fp", server.OutcomeInProgress, time.Second},
		{"no lock TTL: 1s", 0, 0, "fp", server.OutcomeInProgress, time.Second},
		{"other fingerprint against a claim", 30 * time.Second, 0, "other", server.OutcomeMismatch, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock()
			s := New(WithClock(clock.Now))
			req := request("k", "fp")
			req.LockTTL = tt.lockTTL
			var dup server.Result
			dupRuns := 0
			res := mustDo(t, s, req, func(ctx context.Context) (*server.Response, bool) {
				clock.Advance(tt.elapsed)
				dreq := req
				dreq.Fingerprint = tt.dupFP
				dup = mustDo(t, s, dreq, respond(&dupRuns, sampleResponse(), true))
				return sampleResponse(), true
			})
			if res.Outcome != server.OutcomeExecuted {
				t.Fatalf("owner outcome = %v", res.Outcome)
			}
			if dup.Outcome != tt.want || dup.RetryAfter != tt.wantAfter || dup.Response != nil {
				t.Errorf("duplicate = %+v, want %v RetryAfter %v", dup, tt.want, tt.wantAfter)
			}
			if dupRuns != 0 {
				t.Errorf("duplicate ran %d times", dupRuns)
			}
		})
	}
}

func TestRunSeesCallersContext(t *testing.T) {
	t.Parallel()
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "v")
	var got any
	_, err := New().Do(ctx, request("k", "fp"), func(ctx context.Context) (*server.Response, bool) {
		got = ctx.Value(ctxKey{})
		return sampleResponse(), true
	})
	if err != nil || got != "v" {
		t.Fatalf("run saw %v, err %v", got, err)
	}
}

func TestPanicReleasesAndRepanics(t *testing.T) {
	t.Parallel()
	s := New()
	boom := errors.New("boom")
	func() {
		defer func() {
			if r := recover(); r != boom {
				t.Errorf("recovered %v, want the handler's panic", r)
			}
		}()
		_, _ = s.Do(context.Background(), request("k", "fp"), func(context.Context) (*server.Response, bool) {
			panic(boom)
		})
		t.Error("Do returned after run panicked")
	}()
	if n := s.Stats().Entries; n != 0 {
		t.Errorf("entries after panic = %d, want 0", n)
	}
	runs := 0
	if res := mustDo(t, s, request("k", "fp"), respond(&runs, sampleResponse(), true)); res.Outcome != server.OutcomeExecuted || runs != 1 {
		t.Errorf("retry after panic: %v, runs %d", res.Outcome, runs)
	}
}

func TestReleaseDeletesEntry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		resp *server.Response
		keep bool
	}{
		{"keep false", sampleResponse(), false},
		{"nil response", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := New()
			runs := 0
			res := mustDo(t, s, request("k", "fp"), respond(&runs, tt.resp, tt.keep))
			if res.Outcome != server.OutcomeExecuted || res.Response != tt.resp {
				t.Errorf("result = %+v", res)
			}
			if n := s.Stats().Entries; n != 0 {
				t.Errorf("entries = %d, want 0", n)
			}
		})
	}
}

func TestExpiry(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s := New(WithClock(clock.Now))
	runs := 0
	req := request("k", "fp")
	mustDo(t, s, req, respond(&runs, sampleResponse(), true))
	steps := []struct {
		advance time.Duration
		fp      string
		want    server.Outcome
	}{
		{time.Hour - time.Nanosecond, "fp", server.OutcomeReplayed},
		{0, "other", server.OutcomeMismatch},
		{time.Nanosecond, "other", server.OutcomeExecuted}, // expired: a new operation, any fingerprint
		{0, "other", server.OutcomeReplayed},
	}
	for i, st := range steps {
		clock.Advance(st.advance)
		r := req
		r.Fingerprint = st.fp
		if res := mustDo(t, s, r, respond(&runs, sampleResponse(), true)); res.Outcome != st.want {
			t.Fatalf("step %d: outcome %v, want %v", i, res.Outcome, st.want)
		}
	}
	if st := s.Stats(); st.Entries != 1 || st.Evictions != 1 {
		t.Errorf("stats = %+v, want 1 entry, 1 eviction", st)
	}
}

func TestFullFailsClosed(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s := New(WithClock(clock.Now), WithMaxEntries(3), WithScopeShare(1))
	runs := 0
	withTTL := func(key string, ttl time.Duration) server.Request {
		r := request(key, "fp")
		r.TTL = ttl
		return r
	}
	for i, k := range []string{"a", "b", "c"} { // a expires after 1h, b 2h, c 3h
		mustDo(t, s, withTTL(k, time.Duration(i+1)*time.Hour), respond(&runs, sampleResponse(), true))
	}
	_, err := s.Do(context.Background(), request("d", "fp"), respond(&runs, sampleResponse(), true))
	if !errors.Is(err, ErrFull) {
		t.Fatalf("Do when full: err = %v, want ErrFull", err)
	}
	if runs != 3 {
		t.Errorf("run called while full: runs = %d", runs)
	}
	// Live records still answer while full.
	for _, k := range []string{"a", "b", "c"} {
		if res := mustDo(t, s, request(k, "fp"), respond(&runs, nil, true)); res.Outcome != server.OutcomeReplayed {
			t.Errorf("%s while full: %v, want replayed", k, res.Outcome)
		}
	}
	// a expires: room for exactly one newcomer; b and c stay.
	clock.Advance(time.Hour)
	if res := mustDo(t, s, request("d", "fp"), respond(&runs, sampleResponse(), true)); res.Outcome != server.OutcomeExecuted {
		t.Fatalf("after a expired: %v", res.Outcome)
	}
	if _, err := s.Do(context.Background(), request("e", "fp"), respond(&runs, sampleResponse(), true)); !errors.Is(err, ErrFull) {
		t.Fatalf("e: err = %v, want ErrFull", err)
	}
	for _, k := range []string{"b", "c", "d"} {
		if res := mustDo(t, s, request(k, "fp"), respond(&runs, nil, true)); res.Outcome != server.OutcomeReplayed {
			t.Errorf("%s: %v, want replayed (a live record was evicted)", k, res.Outcome)
		}
	}
	got := s.Stats()
	if got.Bytes != s.sumCosts() {
		t.Errorf("stats Bytes = %d, want the %d its entries cost", got.Bytes, s.sumCosts())
	}
	got.Bytes = 0
	if want := (Stats{Entries: 3, Evictions: 1, FullRefusals: 2}); got != want {
		t.Errorf("stats = %+v, want %+v", got, want)
	}
}

func TestFullCountsClaims(t *testing.T) {
	t.Parallel()
	s := New(WithMaxEntries(1), WithScopeShare(1))
	runs := 0
	var inner error
	mustDo(t, s, request("a", "fp"), func(context.Context) (*server.Response, bool) {
		_, inner = s.Do(context.Background(), request("b", "fp"), respond(&runs, sampleResponse(), true))
		return nil, false
	})
	if !errors.Is(inner, ErrFull) || runs != 0 {
		t.Fatalf("Do beside a claim at capacity 1: err %v, runs %d", inner, runs)
	}
	// The released claim freed its slot.
	if res := mustDo(t, s, request("b", "fp"), respond(&runs, sampleResponse(), true)); res.Outcome != server.OutcomeExecuted {
		t.Fatalf("after release: %v", res.Outcome)
	}
}

// TestFullSweepsOtherShards fills the store with records spread over many shards,
// lets them expire, and checks a newcomer in any shard finds room at once.
func TestFullSweepsOtherShards(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	const n = 200
	s := New(WithClock(clock.Now), WithMaxEntries(n), WithScopeShare(1))
	runs := 0
	for i := range n {
		mustDo(t, s, request(fmt.Sprint("k", i), "fp"), respond(&runs, sampleResponse(), true))
	}
	clock.Advance(time.Hour)
	for i := range n {
		if res := mustDo(t, s, request(fmt.Sprint("new", i), "fp"), respond(&runs, sampleResponse(), true)); res.Outcome != server.OutcomeExecuted {
			t.Fatalf("new%d: %v", i, res.Outcome)
		}
	}
	if st := s.Stats(); st.Entries != n || st.Evictions != n || st.FullRefusals != 0 {
		t.Errorf("stats = %+v", st)
	}
	if got := s.countEntries(); got != n {
		t.Errorf("entries in maps = %d, want %d", got, n)
	}
}

func TestInvalidRequest(t *testing.T) {
	t.Parallel()
	runs := 0
	tests := []struct {
		name string
		req  server.Request
		run  server.RunFunc
	}{
		{"zero TTL", server.Request{Key: "k", Fingerprint: "fp"}, respond(&runs, sampleResponse(), true)},
		{"negative TTL", server.Request{Key: "k", Fingerprint: "fp", TTL: -time.Second}, respond(&runs, sampleResponse(), true)},
		{"nil run", request("k", "fp"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New()
			if _, err := s.Do(context.Background(), tt.req, tt.run); !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("err = %v, want ErrInvalidRequest", err)
			}
			if s.Stats().Entries != 0 {
				t.Errorf("entry left behind")
			}
		})
	}
	if runs != 0 {
		t.Errorf("run called %d times", runs)
	}
}

// TestRecordIsCompareAndSet takes the claim away from its owner while the handler
// runs (as a lost lease would in a remote store) and checks that the owner can
// neither record over nor release the newer owner's claim.
func TestRecordIsCompareAndSet(t *testing.T) {
	t.Parallel()
	for _, keep := range []bool{true, false} {
		t.Run(fmt.Sprint("keep=", keep), func(t *testing.T) {
			t.Parallel()
			s := New()
			req := request("k", "fp")
			k := recordKey{scope: req.Scope, key: req.Key}
			sh := s.shardFor(k)
			_, err := s.Do(context.Background(), req, func(context.Context) (*server.Response, bool) {
				sh.mu.Lock()
				sh.m[k].owner = ^uint64(0) // a newer owner
				sh.mu.Unlock()
				return sampleResponse(), keep
			})
			if keep && !errors.Is(err, server.ErrNotRecorded) {
				t.Errorf("record by a stale owner: err = %v, want ErrNotRecorded", err)
			}
			if !keep && err != nil {
				t.Errorf("release by a stale owner: err = %v", err)
			}
			sh.mu.Lock()
			e := sh.m[k]
			sh.mu.Unlock()
			if e == nil || e.owner != ^uint64(0) || e.resp != nil {
				t.Errorf("the newer owner's claim was changed: %+v", e)
			}
		})
	}
}

// TestDoRefusesADoneContext: a request whose time ran out before the store
// was asked (its body took the whole deadline) is not claimed or run.
func TestDoRefusesADoneContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	s := New()
	ran := false
	_, err := s.Do(ctx, request("k", "fp"), func(context.Context) (*server.Response, bool) {
		ran = true
		return &server.Response{Status: 201}, true
	})
	if !errors.Is(err, context.DeadlineExceeded) || ran {
		t.Errorf("Do on a done context = %v (ran %v), want context.DeadlineExceeded and no run", err, ran)
	}
	if n := s.Stats().Entries; n != 0 {
		t.Errorf("%d entries after a refused Do, want 0", n)
	}
}
