package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// stallingBody delivers n bytes, then closes stalled and blocks until
// release is closed, when it fails the read.
type stallingBody struct {
	left    int
	stalled chan struct{}
	release chan struct{}
	once    sync.Once
}

func newStallingBody(n int) *stallingBody {
	return &stallingBody{left: n, stalled: make(chan struct{}), release: make(chan struct{})}
}

var errReleased = errors.New("released")

func (b *stallingBody) Read(p []byte) (int, error) {
	if b.left > 0 {
		n := min(len(p), b.left)
		for i := range p[:n] {
			p[i] = 'x'
		}
		b.left -= n
		return n, nil
	}
	b.once.Do(func() { close(b.stalled) })
	<-b.release
	return 0, errReleased
}

func (b *stallingBody) Close() error { return nil }

// TestLimitsBoundBufferedBodiesAcrossMiddlewares: the bytes of keyed bodies
// held at once are the process's, counted as they arrive, shared by two
// Middlewares over one Limits (issue 27: 300 connections each sending just
// under 1 MiB and stalling took the demo from 19 to 564 MB of RSS, since each
// request was bounded on its own only). A body that does not fit is answered
// 503 with Retry-After and never reaches the store; one that fits still runs;
// a declared Content-Length buys nothing past 16 KiB; and every byte is given
// back once the requests are answered.
func TestLimitsBoundBufferedBodiesAcrossMiddlewares(t *testing.T) {
	t.Parallel()
	lim := NewLimits(LimitBuffered(256 << 10))
	s1, s2 := &fakeStore{}, &fakeStore{}
	h1 := Middleware(s1, WithLimits(lim))(http.HandlerFunc(created))
	h2 := Middleware(s2, WithLimits(lim))(http.HandlerFunc(created))

	// A: 150 KiB of a body of unknown length, then a stall.
	a := newStallingBody(150 << 10)
	ra := request(http.MethodPost, "/a", "", HeaderKey, "a")
	ra.Body, ra.ContentLength = a, -1
	// D: declares 1 MiB, sends 10 bytes, stalls.
	d := newStallingBody(10)
	rd := request(http.MethodPost, "/d", "", HeaderKey, "d")
	rd.Body, rd.ContentLength = d, 1<<20
	var wg sync.WaitGroup
	answers := make([]*httptest.ResponseRecorder, 2)
	for i, c := range []struct {
		h http.Handler
		r *http.Request
	}{{h1, ra}, {h2, rd}} {
		wg.Go(func() { answers[i] = serve(c.h, c.r) })
	}
	<-a.stalled
	<-d.stalled
	// A holds the chunks of its 150 KiB (5 of 32 KiB), D the one chunk of
	// its 10 bytes: nothing of its declared 1 MiB.
	if held, want := lim.Buffered(), int64(6*chunkSize); held != want {
		t.Errorf("Buffered() = %d while A holds 150 KiB and D 10 bytes of its declared 1 MiB; want %d", held, want)
	}

	// B does not fit in what is left: 503, the store is not asked.
	rec := serve(h2, request(http.MethodPost, "/b", strings.Repeat("y", 120<<10), HeaderKey, "b"))
	checkProblem(t, rec, http.StatusServiceUnavailable, ProblemBusy)
	if ra := rec.Header().Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After %q, want 1", ra)
	}
	// C is small and fits: it runs.
	if rec := serve(h1, request(http.MethodPost, "/c", `{"n":1}`, HeaderKey, "c")); rec.Code != http.StatusCreated {
		t.Errorf("a small body while the budget is nearly used: %d %s, want 201", rec.Code, rec.Body)
	}
	if calls, _ := s2.stats(); calls != 0 {
		t.Errorf("the second store was asked %d times, want 0 (D stalled, B refused)", calls)
	}

	close(a.release)
	close(d.release)
	wg.Wait()
	for i, rec := range answers {
		checkProblem(t, rec, http.StatusBadRequest, ProblemBodyUnreadable)
		_ = i
	}
	if n := lim.Buffered(); n != 0 {
		t.Errorf("Buffered() = %d once every request was answered, want 0", n)
	}
}

// TestLimitsBodyLargerThanTheBudget: a body that could never fit is answered
// 503, not read on.
func TestLimitsBodyLargerThanTheBudget(t *testing.T) {
	t.Parallel()
	lim := NewLimits(LimitBuffered(4 << 10))
	store := &fakeStore{}
	h := Middleware(store, WithLimits(lim))(http.HandlerFunc(created))
	rec := serve(h, request(http.MethodPost, "/x", strings.Repeat("z", 10<<10), HeaderKey, "k"))
	checkProblem(t, rec, http.StatusServiceUnavailable, ProblemBusy)
	if calls, _ := store.stats(); calls != 0 || lim.Buffered() != 0 {
		t.Errorf("store calls %d, Buffered %d; want 0 and 0", calls, lim.Buffered())
	}
}

// waitingStore is a Store whose Do, for a request with a Wait, takes a turn
// with WaitTurn and, when it gets one, holds it until release is closed.
type waitingStore struct {
	release chan struct{}
	turns   chan bool // what each WaitTurn said
}

func (s *waitingStore) Do(ctx context.Context, req Request, _ RunFunc) (Result, error) {
	done, ok := WaitTurn(ctx)
	s.turns <- ok
	if !ok {
		return Result{Outcome: OutcomeInProgress}, nil
	}
	defer done()
	<-s.release
	return Result{Outcome: OutcomeInProgress, Waited: time.Millisecond}, nil
}

// TestLimitsBoundWaitingDuplicates: the duplicates waiting at once are the
// Limits', across Middlewares: with room for one, a second duplicate, on
// another Middleware, is answered 409 at once; once the first is done, a
// turn is free again.
func TestLimitsBoundWaitingDuplicates(t *testing.T) {
	t.Parallel()
	lim := NewLimits(LimitWaiting(1))
	store := &waitingStore{release: make(chan struct{}), turns: make(chan bool, 3)}
	h1 := Middleware(store, WithLimits(lim))(http.HandlerFunc(created))
	h2 := Middleware(store, WithLimits(lim))(http.HandlerFunc(created))

	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- serve(h1, request(http.MethodPost, "/x", `{}`, HeaderKey, "k")) }()
	if ok := <-store.turns; !ok {
		t.Fatal("the first duplicate got no turn")
	}
	if n := lim.Waiting(); n != 1 {
		t.Errorf("Waiting() = %d, want 1", n)
	}
	rec := serve(h2, request(http.MethodPost, "/x", `{}`, HeaderKey, "k"))
	if ok := <-store.turns; ok {
		t.Error("a second duplicate got a turn past LimitWaiting(1)")
	}
	checkProblem(t, rec, http.StatusConflict, ProblemInProgress)
	close(store.release)
	checkProblem(t, <-first, http.StatusConflict, ProblemInProgress)
	if n := lim.Waiting(); n != 0 {
		t.Errorf("Waiting() = %d after the wait, want 0", n)
	}
	done, ok := WaitTurn(context.Background())
	if !ok {
		t.Error("WaitTurn on a context that is not a protected request's refused")
	}
	done()
}

// TestLimitsRequestTimeoutBoundsAStalledStore: a store that does not answer
// before the handler runs is answered 503 at the request's deadline, and the
// handler sees that deadline on its context (issue 27: PostgreSQL stalled
// mid-request left the client without an answer for 30 s).
func TestLimitsRequestTimeoutBoundsAStalledStore(t *testing.T) {
	t.Parallel()
	const timeout = 100 * time.Millisecond
	lim := NewLimits(LimitRequestTime(timeout))
	stalled := &fakeStore{do: func(ctx context.Context, _ Request, _ RunFunc) (Result, error) {
		<-ctx.Done() // a stalled store that honours its context
		return Result{}, ctx.Err()
	}}
	start := time.Now()
	rec := serve(Middleware(stalled, WithLimits(lim))(http.HandlerFunc(created)),
		request(http.MethodPost, "/x", `{}`, HeaderKey, "k"))
	checkProblem(t, rec, http.StatusServiceUnavailable, ProblemStoreUnavailable)
	if took := time.Since(start); took < timeout || took > timeout+2*time.Second {
		t.Errorf("answered after %v, want just past the %v deadline", took, timeout)
	}

	var deadline time.Time
	var has bool
	start = time.Now()
	h := Middleware(&fakeStore{}, WithLimits(lim))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deadline, has = r.Context().Deadline()
		w.WriteHeader(http.StatusNoContent)
	}))
	serve(h, request(http.MethodPost, "/x", `{}`, HeaderKey, "k"))
	if !has || deadline.Before(start.Add(timeout)) || deadline.After(time.Now().Add(timeout)) {
		t.Errorf("handler's deadline %v (set %v), want about %v after %v", deadline, has, timeout, start)
	}
	h = Middleware(&fakeStore{}, WithLimits(NewLimits(LimitRequestTime(0))))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, has = r.Context().Deadline()
		w.WriteHeader(http.StatusNoContent)
	}))
	if serve(h, request(http.MethodPost, "/x", `{}`, HeaderKey, "k")); has {
		t.Error("LimitRequestTime(0) set a deadline")
	}
}

// TestLimitsRequestTimeoutEndsAStalledBody: a client that stops sending its
// body is answered 408 at the request's deadline over a real connection,
// instead of holding its buffer until the server's own time-outs.
func TestLimitsRequestTimeoutEndsAStalledBody(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	lim := NewLimits(LimitRequestTime(timeout))
	store := &fakeStore{}
	srv := httptest.NewServer(Middleware(store, WithLimits(lim))(http.HandlerFunc(created)))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	_, err = io.WriteString(conn, "POST /x HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k\r\nContent-Length: "+
		strconv.Itoa(64<<10)+"\r\n\r\n"+strings.Repeat("x", 1000))
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("status %d, want 408", resp.StatusCode)
	}
	if took := time.Since(start); took > timeout+2*time.Second {
		t.Errorf("answered after %v, want about %v", took, timeout)
	}
	if calls, _ := store.stats(); calls != 0 || lim.Buffered() != 0 {
		t.Errorf("store calls %d, Buffered %d; want 0 and 0", calls, lim.Buffered())
	}
}

func TestLimitsOptionsPanic(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		f    func()
		want string
	}{
		{func() { LimitBuffered(0) }, "server: LimitBuffered(0): want n > 0"},
		{func() { LimitWaiting(-1) }, "server: LimitWaiting(-1): want n >= 0"},
		{func() { LimitRequestTime(-time.Second) }, "server: LimitRequestTime(-1s): want a duration >= 0"},
		{func() { WithLimits(nil) }, "server: WithLimits(nil): want a *Limits from NewLimits"},
		{func() { NewLimits(nil) }, "server: NewLimits(nil LimitOption): want a LimitOption"},
	} {
		if got := mustPanic(t, c.f); got != c.want {
			t.Errorf("panic %q, want %q", got, c.want)
		}
	}
}

// TestLimitsWholeBodyCostsNoWatch: a body that arrives whole in its first
// read arms no read-deadline watch (most do; the watch costs allocations),
// and one that does not arms it once.
func TestLimitsWholeBodyCostsNoWatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		body  io.Reader
		cl    int64
		armed int
	}{
		{"declared, whole", strings.NewReader(`{"a":1}`), 7, 0},
		{"unknown length", strings.NewReader(`{"a":1}`), -1, 1},
		{"declared, in two reads", io.MultiReader(strings.NewReader(`{"a"`), strings.NewReader(`:1}`)), 7, 1},
	} {
		r := request(http.MethodPost, "/x", "")
		r.Body, r.ContentLength = io.NopCloser(c.body), c.cl
		armed := 0
		body, held, err := readBody(r, DefaultMaxBodyBytes, NewLimits(), func() { armed++ })
		if err != nil || string(body) != `{"a":1}` || held == 0 || armed != c.armed {
			t.Errorf("%s: %q, held %d, %v, armed %d times; want the body, armed %d", c.name, body, held, err, armed, c.armed)
		}
	}
}
