package idem

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStalledDiscardedBodyBoundedByCap: a 503 whose body stalls used to hold
// the operation in the drain past WithMaxElapsed (forever if the body never
// ends). The drain is bounded by the time left, so the operation ends near
// its cap, and the server sees every connection go (Close waits for them).
func TestStalledDiscardedBodyBoundedByCap(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "partial")
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // the rest never comes
	}))
	defer srv.Close()
	base := newHTTPTransport(t)
	const limit = 500 * time.Millisecond
	tr := NewTransport(base, WithMaxElapsed(limit), WithJitter(NoJitter), WithBackoff(50*time.Millisecond, 50*time.Millisecond))
	start := time.Now()
	resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, srv.URL, ""))
	elapsed := time.Since(start)
	if resp != nil {
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	} else {
		require.ErrorIs(t, err, ErrExhausted)
	}
	assert.Less(t, elapsed, limit+700*time.Millisecond, "the operation outlived its cap")
	base.CloseIdleConnections()
}

// TestBufferingStopsAtCancel: a body without GetBody, of known length, is
// buffered; a producer that pauses no longer holds RoundTrip past the
// caller's deadline.
func TestBufferingStopsAtCancel(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: statusSteps(200)}
		tr := NewTransport(f)
		pr, pw := io.Pipe()
		resume := make(chan struct{})
		go func() {
			_, _ = pw.Write([]byte("ab"))
			<-resume // the producer pauses
			_, err := pw.Write([]byte("cdefghij"))
			assert.ErrorIs(t, err, io.ErrClosedPipe, "idem closed the body it gave up on")
		}()
		defer close(resume)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://x/", pr)
		req.ContentLength = 10
		start := time.Now()
		_, err := tr.RoundTrip(req)
		assert.Equal(t, 200*time.Millisecond, time.Since(start))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Empty(t, f.Calls(), "nothing sent")
		synctest.Wait()
	})
}

// slowReader returns its data after sleeping d, once.
type slowReader struct {
	d    time.Duration
	data string
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.data == "" {
		return 0, io.EOF
	}
	time.Sleep(r.d)
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// TestBufferingCountsAgainstTheCap: the time spent buffering a body without
// GetBody is the operation's, so the first attempt has only what is left
// under the WithMaxElapsed cap: after 4 s of reading under a 10 s cap, it
// asks the server to wait at most 5 s (Prefer: wait, 6 s less a tenth), not 9.
func TestBufferingCountsAgainstTheCap(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var prefer string
		next := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			prefer = r.Header.Get("Prefer")
			_, _ = io.Copy(io.Discard, r.Body)
			return &http.Response{StatusCode: http.StatusCreated, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
		})
		req, _ := http.NewRequest(http.MethodPost, "http://x/payments", io.NopCloser(&slowReader{d: 4 * time.Second, data: "0123456789"}))
		req.ContentLength = 10
		req.Header.Set(headerKeyName, "k-1")
		resp, err := NewTransport(next, WithMaxElapsed(10*time.Second)).RoundTrip(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, "wait=5", prefer)
	})
}

// TestStreamingBodySentOnce: a body without GetBody and of unknown length is a
// stream: it goes out as it is, in one attempt that is not retried, even for
// a keyed request, and the caller gets the response.
func TestStreamingBodySentOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: statusSteps(503, 200)}
		tr := NewTransport(f, noWait())
		pr, pw := io.Pipe()
		go func() { _, _ = pw.Write([]byte("streamed")); _ = pw.Close() }()
		req, _ := http.NewRequest(http.MethodPost, "http://x/", pr)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, 503, resp.StatusCode)
		_ = resp.Body.Close()
		calls := f.Calls()
		require.Len(t, calls, 1)
		assert.Equal(t, "streamed", calls[0].body)
		assert.Len(t, calls[0].key, 1, "keyed all the same")
	})
}

// TestFullDuplexHTTP2: a full-duplex HTTP/2 exchange (the client writes the
// request body after reading part of the response) through idem used to
// deadlock, idem waiting for the whole body before sending it.
func TestFullDuplexHTTP2(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		buf := make([]byte, 64)
		for {
			n, err := r.Body.Read(buf)
			if n > 0 {
				_, _ = w.Write(buf[:n])
				_ = rc.Flush()
			}
			if err != nil {
				return
			}
		}
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	tr := NewTransport(srv.Client().Transport)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, pr)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err, "the response headers come before the body is written")
	defer resp.Body.Close()
	require.Equal(t, 2, resp.ProtoMajor)
	for _, msg := range []string{"ping", "pong"} {
		_, err := pw.Write([]byte(msg))
		require.NoError(t, err)
		got := make([]byte, len(msg))
		_, err = io.ReadFull(resp.Body, got)
		require.NoError(t, err)
		assert.Equal(t, msg, string(got))
	}
	_ = pw.Close()
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Empty(t, rest)
}

// TestRequestTrailersKept: a chunked request body keeps its trailers through
// idem over HTTP/1.1: a streamed one (no GetBody) in its single attempt, a
// rewindable one in every attempt.
func TestRequestTrailersKept(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen", strings.Join(r.TransferEncoding, ",")+"|"+r.Trailer.Get("X-Checksum")+"|"+string(body))
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	tr := NewTransport(newHTTPTransport(t), noWait())
	for _, tc := range []struct {
		name     string
		body     func() io.Reader
		attempts int32
	}{
		{"streamed", func() io.Reader { return io.NopCloser(strings.NewReader("payload")) }, 1},
		{"rewindable", func() io.Reader { return strings.NewReader("payload") }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n.Store(0)
			req, _ := http.NewRequest(http.MethodPut, srv.URL, tc.body())
			req.ContentLength = -1 // chunked
			req.Trailer = http.Header{"X-Checksum": {"c0ffee"}}
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, tc.attempts, n.Load())
			assert.Equal(t, "chunked|c0ffee|payload", resp.Header.Get("X-Seen"))
		})
	}
}

// TestContentLengthMismatch: a body that disagrees with its ContentLength fails
// as net/http fails (idem used to correct the length and send it), and is not
// retried. net/http reports the mismatch itself, or, when the server's answer
// or close wins the race with its check (seen under a PostgreSQL load beside
// make test), the connection's error: either way idem's error carries the one
// error net/http returned, from one attempt.
func TestContentLengthMismatch(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	base := newHTTPTransport(t)
	newReq := func() *http.Request {
		req, _ := http.NewRequest(http.MethodPut, srv.URL, io.NopCloser(strings.NewReader("abc")))
		req.ContentLength = 5
		return req
	}
	_, alone := base.RoundTrip(newReq())
	require.Error(t, alone, "net/http sends a body shorter than its ContentLength")
	var sent []error // what net/http returned to idem's attempts
	record := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := base.RoundTrip(req)
		sent = append(sent, err)
		return resp, err
	})
	_, err := NewTransport(record, noWait()).RoundTrip(newReq())
	require.Error(t, err)
	require.Len(t, sent, 1, "attempts sent")
	require.Error(t, sent[0])
	assert.True(t, sent[0] == asError(t, err).LastErr, "the *Error's LastErr %v is net/http's error %v, as it is", asError(t, err).LastErr, sent[0])
	assert.Contains(t, err.Error(), sent[0].Error())
	assert.Contains(t, err.Error(), "error not retryable")
	assert.Equal(t, 1, asError(t, err).Attempts)
}

// TestNonCanonicalKeyHeaderSentOnce: a key set under a non-canonical map entry
// (h["idempotency-key"]) is the operation's key, sent once: idem used to add
// a generated key beside it.
func TestNonCanonicalKeyHeaderSentOnce(t *testing.T) {
	t.Parallel()
	var seen atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(strings.Join(r.Header.Values(headerKeyName), ","))
	}))
	defer srv.Close()
	req := mustRequest(t, context.Background(), http.MethodPost, srv.URL, "{}")
	req.Header["idempotency-key"] = []string{"k1"}
	resp, err := NewTransport(newHTTPTransport(t)).RoundTrip(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, "k1", seen.Load())
	assert.Equal(t, "k1", keyOf(resp))

	// Two spellings are two values: an invalid key, nothing sent.
	req = mustRequest(t, context.Background(), http.MethodPost, srv.URL, "{}")
	req.Header["idempotency-key"] = []string{"k1"}
	req.Header.Set(headerKeyName, "k2")
	_, err = NewTransport(newHTTPTransport(t)).RoundTrip(req)
	require.True(t, errors.Is(err, ErrInvalidKey), "err %v", err)
}

// stallBody is a response body that gives a few bytes, then blocks until it
// is closed.
type stallBody struct {
	once   atomic.Bool
	closed chan struct{}
	shut   atomic.Bool
}

func newStallBody() *stallBody { return &stallBody{closed: make(chan struct{})} }

func (b *stallBody) Read(p []byte) (int, error) {
	if !b.once.Swap(true) {
		return copy(p, "partial"), nil
	}
	<-b.closed
	return 0, errors.New("read on closed body")
}

func (b *stallBody) Close() error {
	if !b.shut.Swap(true) {
		close(b.closed)
	}
	return nil
}

// TestStalledDrainExact pins, in virtual time, how a stalled discarded body is
// bounded: each drain takes at most half the time that would be left after
// the wait, no attempt starts with nothing left, and the operation ends on its
// last response (not an error) within the cap.
func TestStalledDrainExact(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var starts []time.Duration
		start := time.Now()
		rt := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			starts = append(starts, time.Since(start))
			return &http.Response{StatusCode: 503, Header: http.Header{}, Body: newStallBody(), Request: req}, nil
		})
		tr := NewTransport(rt, WithMaxElapsed(time.Second), WithJitter(NoJitter), WithBackoff(100*time.Millisecond, time.Second))
		resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodGet, "http://x/", ""))
		require.NoError(t, err, "the last response, not an error")
		assert.Equal(t, 503, resp.StatusCode)
		_ = resp.Body.Close()
		ms := time.Millisecond
		// Attempt 1 at 0; drain until (1000-100)/2 = 450, wait 100: attempt 2 at
		// 550; drain (1000-750)/2 = 125 until 675, wait 200: attempt 3 at 875;
		// the next wait (400) would end past the cap: its 503 is returned.
		assert.Equal(t, []time.Duration{0, 550 * ms, 875 * ms}, starts)
		assert.Equal(t, 875*ms, time.Since(start))
	})
}

// TestGetBodyFailureRefundsToken: a retry the budget allowed but that is not
// sent (GetBody fails) hands its token back.
func TestGetBodyFailureRefundsToken(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{steps: []fakeStep{{status: 503}}}
		b := newBudget()
		tr := NewTransport(f, noWait(), WithRetryBudget(b))
		req := mustRequest(t, context.Background(), http.MethodPut, "http://x/", "body")
		req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("no second copy") }
		resp, err := tr.RoundTrip(req)
		if resp != nil {
			_ = resp.Body.Close()
		}
		s := b.Stats()
		if s.RetriesAllowed != 1 || s.Refunds != 1 {
			t.Errorf("budget stats %+v after a GetBody failure: want 1 retry allowed and 1 refunded (err %v)", s, err)
		}
	})
}
