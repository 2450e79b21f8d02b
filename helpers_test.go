package idem

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/retry"
)

// fakeStep is what fakeRT does for one attempt.
type fakeStep struct {
	status int
	header http.Header
	body   string
	err    error
	block  bool // wait until the attempt's context is done, then fail with its error
	// delay holds the answer back this long, as a server that waits for the
	// first request does; if the attempt's context ends first, it fails with
	// the context's error.
	delay time.Duration
}

// fakeCall is one attempt fakeRT received.
type fakeCall struct {
	at     time.Time
	method string
	key    []string // the Idempotency-Key header values
	body   string
	req    *http.Request
}

// fakeRT is a scripted, in-memory RoundTripper: attempt i gets steps[i] (the last
// step repeats). It records every attempt and every response body it hands out.
type fakeRT struct {
	mu     sync.Mutex
	steps  []fakeStep
	calls  []fakeCall
	bodies []*trackedBody
}

func (f *fakeRT) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	i := len(f.calls)
	f.calls = append(f.calls, fakeCall{
		at: time.Now(), method: req.Method, key: req.Header.Values(headerKeyName),
		body: string(body), req: req,
	})
	st := f.steps[min(i, len(f.steps)-1)]
	f.mu.Unlock()
	if st.block {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	if st.delay > 0 {
		t := time.NewTimer(st.delay)
		select {
		case <-req.Context().Done():
			t.Stop()
			return nil, req.Context().Err()
		case <-t.C:
		}
	}
	if st.err != nil {
		return nil, st.err
	}
	h := st.header.Clone()
	if h == nil {
		h = http.Header{}
	}
	tb := &trackedBody{r: strings.NewReader(st.body), ctx: req.Context()}
	f.mu.Lock()
	f.bodies = append(f.bodies, tb)
	f.mu.Unlock()
	return &http.Response{
		Status: http.StatusText(st.status), StatusCode: st.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: tb, ContentLength: int64(len(st.body)), Request: req,
	}, nil
}

func (f *fakeRT) Calls() []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeCall(nil), f.calls...)
}

func (f *fakeRT) Bodies() []*trackedBody {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*trackedBody(nil), f.bodies...)
}

// trackedBody is a response body that fails, like a real connection, once its
// request's context is done, and records how far it was read and whether it
// was closed.
type trackedBody struct {
	r      *strings.Reader
	ctx    context.Context
	read   atomic.Int64
	closed atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errors.New("read on closed body")
	}
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := b.r.Read(p)
	b.read.Add(int64(n))
	return n, err
}

func (b *trackedBody) Close() error {
	b.closed.Store(true)
	return nil
}

// steps is shorthand for fakeSteps with the given statuses.
func statusSteps(codes ...int) []fakeStep {
	s := make([]fakeStep, len(codes))
	for i, c := range codes {
		s[i] = fakeStep{status: c, body: http.StatusText(c)}
	}
	return s
}

// noWait makes a Transport's waits zero, for tests of what is retried rather
// than when.
func noWait() Option { return WithBackoff(0, 0) }

// mustRequest builds a request with a body from a *strings.Reader (so GetBody is set).
func mustRequest(t testing.TB, ctx context.Context, method, url, body string) *http.Request {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// asError returns err as an *Error, failing the test if it is not one.
func asError(t testing.TB, err error) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *Error", err, err)
	}
	return e
}

// readAll reads and closes resp's body.
func readAll(t testing.TB, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(b)
}

// timeoutErr is a net.Error that timed out.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// waitLimit bounds every wait of a test on a channel, so that a broken rule
// fails the test with a message instead of hanging it until go test's
// time-out.
const waitLimit = 5 * time.Second

// waitFor receives from ch within waitLimit, or fails the test saying what
// did not happen. Call it on the test's goroutine, outside synctest bubbles
// (where time is fake and a receive that can never end fails as a deadlock).
func waitFor[T any](t testing.TB, ch <-chan T, what string, args ...any) T {
	t.Helper()
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("waited %v: "+what, append([]any{waitLimit}, args...)...)
	}
	var zero T
	return zero
}

// keyOf returns the key the operation that answered resp sent: the key in
// the AttemptInfo its attempt carried.
func keyOf(resp *http.Response) string {
	a, _ := AttemptFromContext(resp.Request.Context())
	return a.Key
}

// The engine's names the tests of the HTTP driver use.
const pollInterval = retry.PollInterval

var spread = retry.Spread

// retryQuota returns the bucket of the Transport's own budget.
func (t *Transport) retryQuota(cfg *config) *retryQuota {
	return t.limit(cfg).(budgetLimit).b.bucket
}
