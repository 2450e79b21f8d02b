package idem

import (
	"os"
	"time"

	"github.com/idemkit/idem/internal/retry"

	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/internal/keyformat"
)

func TestOneKeyPerOperation(t *testing.T) {
	t.Parallel()
	f := &fakeRT{steps: statusSteps(503, 502, 200, 503, 200)}
	tr := NewTransport(f, noWait())
	for range 2 {
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodPost, "http://x/pay", "{}"))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	calls := f.Calls()
	if len(calls) != 5 {
		t.Fatalf("%d attempts, want 5", len(calls))
	}
	first, second := calls[0].key, calls[3].key
	if len(first) != 1 || keyformat.Check(first[0], 0) != nil {
		t.Fatalf("first operation sent key %q", first)
	}
	for i, c := range calls {
		want := first
		if i >= 3 {
			want = second
		}
		if !reflect.DeepEqual(c.key, want) {
			t.Errorf("attempt %d sent key %q, want %q", i, c.key, want)
		}
		if c.body != "{}" {
			t.Errorf("attempt %d sent body %q", i, c.body)
		}
	}
	if first[0] == second[0] {
		t.Error("two operations shared one key")
	}
}

func TestKeyPriority(t *testing.T) {
	t.Parallel()
	gen := func() string { return "generated" }
	tests := []struct {
		name      string
		method    string
		header    []string // on the request
		ctxKey    string
		quoted    bool
		autoKeys  bool
		wantSent  []string
		wantKeyed string // the key the attempt reported (AttemptInfo.Key)
	}{
		{"header wins, sent as is", http.MethodPost, []string{`"hdr"`}, "ctx", false, true, []string{`"hdr"`}, "hdr"},
		{"raw header not re-formatted", http.MethodPost, []string{"hdr"}, "", true, true, []string{"hdr"}, "hdr"},
		{"context over generated", http.MethodPost, nil, "ctx", false, true, []string{"ctx"}, "ctx"},
		{"context formatted as sf-string", http.MethodPatch, nil, `c"x`, true, true, []string{`"c\"x"`}, `c"x`},
		{"generated for POST", http.MethodPost, nil, "", false, true, []string{"generated"}, "generated"},
		{"generated sf-string", http.MethodPatch, nil, "", true, true, []string{`"generated"`}, "generated"},
		{"none when auto keys off", http.MethodPost, nil, "", false, false, nil, ""},
		{"none for GET", http.MethodGet, nil, "", false, true, nil, ""},
		{"none for PUT", http.MethodPut, nil, "", false, true, nil, ""},
		{"none for DELETE", http.MethodDelete, nil, "", false, true, nil, ""},
		{"none for HEAD", http.MethodHead, nil, "", false, true, nil, ""},
		{"GET keyed by context", http.MethodGet, nil, "ctx", false, true, []string{"ctx"}, "ctx"},
		{"DELETE keyed by header", http.MethodDelete, []string{"d"}, "", false, true, []string{"d"}, "d"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeRT{steps: statusSteps(200)}
			tr := NewTransport(f, WithKeyGenerator(gen), withQuoted(tt.quoted), WithAutoKeys(tt.autoKeys))
			ctx := context.Background()
			if tt.ctxKey != "" {
				ctx = ContextWithKey(ctx, tt.ctxKey)
			}
			req := mustRequest(t, ctx, tt.method, "http://x/", "")
			if tt.header != nil {
				req.Header[headerKeyName] = tt.header
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if got := f.Calls()[0].key; !reflect.DeepEqual(got, tt.wantSent) {
				t.Errorf("sent %q, want %q", got, tt.wantSent)
			}
			if got := keyOf(resp); got != tt.wantKeyed {
				t.Errorf("the attempt's AttemptInfo.Key = %q, want %q", got, tt.wantKeyed)
			}
		})
	}
}

func TestInvalidKeyNothingSent(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 256)
	tests := []struct {
		name   string
		header []string
		ctxKey *string
		gen    func() string
		source string
	}{
		{"header too long", []string{long}, nil, nil, "header"},
		{"header with space", []string{"a b"}, nil, nil, "header"},
		{"header not ASCII", []string{"clé"}, nil, nil, "header"},
		{"header two values", []string{"a", "b"}, nil, nil, "header"},
		{"header empty", []string{""}, nil, nil, "header"},
		{"header bad sf-string", []string{`"abc`}, nil, nil, "header"},
		{"header bad escape", []string{`"a\b"`}, nil, nil, "header"},
		{"context too long", nil, &long, nil, "context"},
		{"context empty", nil, new(string), nil, "context"},
		{"generator bad", nil, nil, func() string { return "bad key" }, "generator"},
		{"generator raw quote", nil, nil, func() string { return `"k` }, "generator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeRT{steps: statusSteps(200)}
			opts := []Option{}
			if tt.gen != nil {
				opts = append(opts, WithKeyGenerator(tt.gen))
			}
			tr := NewTransport(f, opts...)
			ctx := context.Background()
			if tt.ctxKey != nil {
				ctx = ContextWithKey(ctx, *tt.ctxKey)
			}
			body := &closeCounter{Reader: strings.NewReader("body")}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://x/", body)
			if tt.header != nil {
				req.Header[headerKeyName] = tt.header
			}
			resp, err := tr.RoundTrip(req)
			if resp != nil {
				t.Fatal("got a response")
			}
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("err = %v, want ErrInvalidKey", err)
			}
			if e := asError(t, err); e.Attempts != 0 {
				t.Errorf("Attempts = %d", e.Attempts)
			}
			var ke *keyError
			if !errors.As(err, &ke) || ke.source != tt.source {
				t.Errorf("error %v: want source %q", err, tt.source)
			}
			if n := len(f.Calls()); n != 0 {
				t.Errorf("%d attempts sent", n)
			}
			if body.closed.Load() != 1 {
				t.Error("request body not closed")
			}
		})
	}
}

// closeCounter is a request body without GetBody that counts its Close calls.
type closeCounter struct {
	io.Reader
	closed atomic.Int32
}

func (c *closeCounter) Close() error { c.closed.Add(1); return nil }

func TestCallerRequestUnchanged(t *testing.T) {
	t.Parallel()
	f := &fakeRT{steps: statusSteps(500, 500, 200)}
	tr := NewTransport(f, noWait(), WithAttemptTimeout(1<<40))
	req := mustRequest(t, context.Background(), http.MethodPost, "http://x/a?b=c", "payload")
	req.Header.Set("X-Trace", "t1")
	before := req.Header.Clone()
	ctx := req.Context()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if !reflect.DeepEqual(req.Header, before) {
		t.Errorf("caller's header changed: %v", req.Header)
	}
	if req.Context() != ctx || req.URL.String() != "http://x/a?b=c" {
		t.Error("caller's request changed")
	}
	for i, c := range f.Calls() {
		if c.req == req {
			t.Errorf("attempt %d sent the caller's request itself", i)
		}
		if c.body != "payload" || c.req.Header.Get("X-Trace") != "t1" {
			t.Errorf("attempt %d: body %q, headers %v", i, c.body, c.req.Header)
		}
	}
}

func TestBodies(t *testing.T) {
	t.Parallel()
	const payload = "0123456789"
	tests := []struct {
		name      string
		body      func() io.Reader
		limit     int64
		steps     []fakeStep
		wantCalls int
		wantErr   error // Cause of the *Error, or nil for a response
		wantCode  int
	}{
		{"GetBody", func() io.Reader { return strings.NewReader(payload) }, 100, statusSteps(503, 503, 200), 3, nil, 200},
		{"buffered", func() io.Reader { return io.NopCloser(strings.NewReader(payload)) }, 100, statusSteps(503, 200), 2, nil, 200},
		{"buffered at limit", func() io.Reader { return io.NopCloser(strings.NewReader(payload)) }, 10, statusSteps(503, 200), 2, nil, 200},
		{"too large, response", func() io.Reader { return io.NopCloser(strings.NewReader(payload)) }, 9, statusSteps(503, 200), 1, nil, 503},
		{"too large, error", func() io.Reader { return io.NopCloser(strings.NewReader(payload)) }, 9,
			[]fakeStep{{err: io.EOF}, {status: 200}}, 1, ErrBodyNotReplayable, 0},
		{"buffering off", func() io.Reader { return io.NopCloser(strings.NewReader(payload)) }, 0, statusSteps(503, 200), 1, nil, 503},
		{"no body", func() io.Reader { return nil }, 100, statusSteps(503, 200), 2, nil, 200},
		// A body of unknown length without GetBody is a stream: sent once.
		{"unknown length", func() io.Reader { return io.NopCloser(strings.NewReader(payload)) }, 100, statusSteps(503, 200), 1, nil, 503},
		{"empty unknown body", func() io.Reader { return io.NopCloser(strings.NewReader("")) }, 100, statusSteps(503, 200), 1, nil, 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeRT{steps: tt.steps}
			tr := NewTransport(f, noWait(), WithBodyBufferLimit(tt.limit))
			req, _ := http.NewRequest(http.MethodPost, "http://x/", tt.body())
			if req.GetBody == nil && req.Body != nil && !strings.Contains(tt.name, "unknown") {
				req.ContentLength = int64(len(payload)) // known length, no GetBody
			}
			resp, err := tr.RoundTrip(req)
			calls := f.Calls()
			if len(calls) != tt.wantCalls {
				t.Fatalf("%d attempts, want %d", len(calls), tt.wantCalls)
			}
			want := payload
			if tt.name == "no body" || tt.name == "empty unknown body" {
				want = ""
			}
			for i, c := range calls {
				if c.body != want {
					t.Errorf("attempt %d sent %q, want %q", i, c.body, want)
				}
			}
			if tt.wantErr != nil {
				if resp != nil || !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, %v; want error %v", resp, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.wantCode {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.wantCode)
			}
			_ = resp.Body.Close()
		})
	}
}

func TestGetBodyFails(t *testing.T) {
	t.Parallel()
	f := &fakeRT{steps: []fakeStep{{err: io.ErrUnexpectedEOF}, {status: 200}}}
	tr := NewTransport(f, noWait())
	req := mustRequest(t, context.Background(), http.MethodPut, "http://x/", "body")
	boom := errors.New("cannot reopen")
	req.GetBody = func() (io.ReadCloser, error) { return nil, boom }
	_, err := tr.RoundTrip(req)
	if !errors.Is(err, ErrBodyNotReplayable) || !errors.Is(err, boom) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want ErrBodyNotReplayable, the GetBody error and the attempt's error", err)
	}
	if n := len(f.Calls()); n != 1 {
		t.Errorf("%d attempts", n)
	}
}

func TestBodyReadError(t *testing.T) {
	t.Parallel()
	f := &fakeRT{steps: statusSteps(200)}
	tr := NewTransport(f)
	boom := errors.New("disk gone")
	req, _ := http.NewRequest(http.MethodPut, "http://x/", io.NopCloser(io.MultiReader(strings.NewReader("a"), errReader{boom})))
	req.ContentLength = 2 // a known length: the body is buffered
	_, err := tr.RoundTrip(req)
	if e := asError(t, err); e.Attempts != 0 || !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if n := len(f.Calls()); n != 0 {
		t.Errorf("%d attempts", n)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestDiscardedResponsesClosed(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 100<<10)
	f := &fakeRT{steps: []fakeStep{{status: 503, body: "small"}, {status: 502, body: big}, {status: 200, body: "ok"}}}
	tr := NewTransport(f, noWait())
	resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
	if err != nil {
		t.Fatal(err)
	}
	bodies := f.Bodies()
	if !bodies[0].closed.Load() || bodies[0].read.Load() != 5 {
		t.Errorf("first body: closed %v, read %d", bodies[0].closed.Load(), bodies[0].read.Load())
	}
	if !bodies[1].closed.Load() || bodies[1].read.Load() != drainLimit {
		t.Errorf("large body: closed %v, read %d, want the drain limit %d", bodies[1].closed.Load(), bodies[1].read.Load(), drainLimit)
	}
	if bodies[2].closed.Load() {
		t.Error("returned body closed")
	}
	if got := readAll(t, resp); got != "ok" {
		t.Errorf("body %q", got)
	}
}

func TestCloseIdleConnections(t *testing.T) {
	t.Parallel()
	c := &idleCloser{}
	NewTransport(c).CloseIdleConnections()
	if c.n != 1 {
		t.Errorf("forwarded %d times", c.n)
	}
	NewTransport(&fakeRT{}).CloseIdleConnections() // no such method: no panic
}

type idleCloser struct {
	fakeRT
	n int
}

func (c *idleCloser) CloseIdleConnections() { c.n++ }

func TestConcurrentOperations(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{}
	rt := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		b, _ := io.ReadAll(req.Body)
		key := req.Header.Get(headerKeyName)
		mu.Lock()
		seen[key]++
		n := seen[key]
		mu.Unlock()
		if !bytes.HasPrefix(b, []byte("op")) {
			return nil, errors.New("bad body")
		}
		code := 200
		if n == 1 {
			code = 503
		}
		return &http.Response{StatusCode: code, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
	})
	tr := NewTransport(rt, noWait())
	var wg sync.WaitGroup
	const ops = 50
	for i := range ops {
		wg.Go(func() {
			req := mustRequest(t, context.Background(), http.MethodPost, "http://x/", "op"+strings.Repeat("!", i))
			resp, err := tr.RoundTrip(req)
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("op %d: %v", i, err)
				return
			}
			_ = resp.Body.Close()
		})
	}
	wg.Wait()
	if len(seen) != ops {
		t.Errorf("%d distinct keys, want %d", len(seen), ops)
	}
	for k, n := range seen {
		if n != 2 {
			t.Errorf("key %s sent %d times, want 2", k, n)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestErrorMessageAndUnwrap(t *testing.T) {
	t.Parallel()
	last := io.EOF
	tests := []struct {
		err  *Error
		want string
	}{
		{&Error{Attempts: 5, Key: "k", LastErr: last, LastStatus: 503, Cause: ErrExhausted, detail: "all attempts used"},
			"idem: stopped after 5 attempts: retries exhausted (all attempts used); last error: EOF; last status: 503"},
		{&Error{Attempts: 1, LastErr: last}, "idem: stopped after 1 attempt: error not retryable; last error: EOF"},
		{&Error{Cause: ErrInvalidKey}, "idem: no attempt made: invalid idempotency key"},
		{&Error{Attempts: 2, Cause: context.Canceled, LastErr: context.Canceled}, "idem: stopped after 2 attempts: context canceled"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q\nwant      %q", got, tt.want)
		}
	}
	e := &Error{Attempts: 3, LastErr: last, Cause: ErrBudgetExhausted}
	if !errors.Is(e, io.EOF) || !errors.Is(e, ErrBudgetExhausted) || errors.Is(e, ErrExhausted) {
		t.Error("errors.Is does not see Cause and LastErr")
	}
	if len((&Error{}).Unwrap()) != 0 {
		t.Error("empty Error unwraps to something")
	}
}

func TestInnerErrorMessages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want string
	}{
		{&keyError{source: "header", reason: "empty"}, "idem: invalid idempotency key from the header: empty"},
		{&attemptTimeoutError{after: 2e9}, "idem: attempt timed out after 2s"},
		{&attemptTimeoutError{after: 1e9, capped: true}, "idem: attempt cut after 1s by the WithMaxElapsed cap"},
		{&retry.WrapError{Sentinel: ErrBodyNotReplayable, Err: io.EOF}, "idem: request body cannot be replayed: EOF"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	var ne interface{ Timeout() bool }
	if !errors.As(error(&attemptTimeoutError{}), &ne) || !ne.Timeout() {
		t.Error("attempt timeout is not a net.Error timeout")
	}
}

// withQuoted is WithQuotedKeys when on, else an option that changes nothing.
func withQuoted(on bool) Option {
	if on {
		return WithQuotedKeys(true)
	}
	return WithAutoKeys(true)
}

// TestTimeoutLooksLikeTimeout: an http.Client Timeout, a context deadline and
// the WithMaxElapsed cap that end an operation give an error that says
// Timeout() (os.IsTimeout, *url.Error), as net/http's own do; a cancel and a
// refused retry do not.
func TestTimeoutLooksLikeTimeout(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	defer close(hang)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/503" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		select {
		case <-r.Context().Done():
		case <-hang:
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name    string
		client  *http.Client
		ctx     func() (context.Context, context.CancelFunc)
		path    string
		timeout bool
	}{
		{"http.Client Timeout", &http.Client{Transport: NewTransport(nil), Timeout: 200 * time.Millisecond}, nil, "/", true},
		{"context deadline", NewClient(), func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}, "/", true},
		{"WithMaxElapsed cap", NewClient(WithMaxElapsed(200 * time.Millisecond)), nil, "/", true},
		{"cancelled", NewClient(), func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			return ctx, cancel
		}, "/", false},
		{"invalid key", NewClient(WithKeyGenerator(func() string { return "bad key" })), nil, "/", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tc.ctx != nil {
				ctx, cancel = tc.ctx()
			}
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+tc.path, nil)
			resp, err := tc.client.Do(req)
			if err == nil {
				_ = resp.Body.Close()
				t.Fatalf("got %d, want an error", resp.StatusCode)
			}
			var ue *url.Error
			if !errors.As(err, &ue) {
				t.Fatalf("err %T, want *url.Error", err)
			}
			if got := os.IsTimeout(err); got != tc.timeout {
				t.Errorf("os.IsTimeout(%v) = %v, want %v", err, got, tc.timeout)
			}
			if got := ue.Timeout(); got != tc.timeout {
				t.Errorf("(*url.Error).Timeout() = %v, want %v", got, tc.timeout)
			}
		})
	}
}
