package idem

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFirstAttemptCapOverHTTP runs the Transport's own bound of a first
// attempt through net/http, whose per-request context derives from the
// attempt's: a handler that never answers is cut at the WithMaxElapsed cap,
// and the server sees the connection go, whether or not the caller's context
// can be cancelled; the error says the cap ended it (ErrExhausted, not the
// context's DeadlineExceeded); a caller's cancellation still ends the attempt
// at once.
func TestFirstAttemptCapOverHTTP(t *testing.T) {
	t.Parallel()
	const limit = 300 * time.Millisecond
	tests := []struct {
		name   string
		ctx    func() (context.Context, context.CancelFunc)
		cancel bool // the caller cancels once the server has the request
		want   error
	}{
		{"background", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }, false, ErrExhausted},
		{"cancellable", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, false, ErrExhausted},
		{"caller cancels", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, true, context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			started, gone, release := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{})
			srv := newCountingServer(t, func(n int32, w http.ResponseWriter, r *http.Request) {
				started <- struct{}{}
				select {
				case <-r.Context().Done():
					gone <- struct{}{}
				case <-release:
				}
			})
			defer close(release)
			ctx, cancel := tc.ctx()
			defer cancel()
			maxElapsed := limit
			if tc.cancel {
				maxElapsed = time.Hour
				go func() { <-started; cancel() }()
			}
			tr := NewTransport(newHTTPTransport(t), WithMaxElapsed(maxElapsed))
			start := time.Now()
			resp, err := tr.RoundTrip(mustRequest(t, ctx, http.MethodPost, srv.URL, "{}"))
			if resp != nil {
				t.Fatalf("got a response: %d", resp.StatusCode)
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("err %v, want %v", err, tc.want)
			}
			if !tc.cancel && errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err %v matches context.DeadlineExceeded; the caller's context is fine, the cap ended it", err)
			}
			if el := time.Since(start); !tc.cancel && el < limit {
				t.Errorf("returned after %v, before the %v cap", el, limit)
			}
			waitFor(t, gone, "the server never saw the attempt cancelled")
		})
	}
}

// TestKeyedHeaderLeavesTheCallersValuesAlone: an attempt's header is the
// caller's values under their own names, plus the key and Prefer; a
// RoundTripper that appends to the attempt's values (Header.Add) writes into
// arrays of its own, never into the spare capacity of the caller's.
func TestKeyedHeaderLeavesTheCallersValuesAlone(t *testing.T) {
	t.Parallel()
	backing := []string{"a", "spare", "spare"}
	prefer := []string{"respond-async", "spare"}
	src := http.Header{"X-List": backing[:1], "Prefer": prefer[:1], headerKeyName: {"\"k\""}}
	var got http.Header
	next := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r.Header.Add("X-List", "b")
		r.Header.Add("Prefer", "c")
		got = r.Header
		return &http.Response{StatusCode: http.StatusCreated, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	req, err := http.NewRequest(http.MethodPost, "http://x/payments", nil)
	require.NoError(t, err)
	req.Header = src
	_, err = NewTransport(next, WithMaxElapsed(30*time.Second)).RoundTrip(req)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, got["X-List"])
	require.Len(t, got["Prefer"], 3)
	assert.Equal(t, "respond-async", got["Prefer"][0])
	assert.Regexp(t, `^wait=2[0-7]$`, got["Prefer"][1])
	assert.Equal(t, "c", got["Prefer"][2])
	assert.Equal(t, []string{"\"k\""}, got[headerKeyName])
	assert.Equal(t, []string{"a", "spare", "spare"}, backing, "the caller's array")
	assert.Equal(t, []string{"respond-async", "spare"}, prefer, "the caller's array")
	assert.Equal(t, http.Header{"X-List": {"a"}, "Prefer": {"respond-async"}, headerKeyName: {"\"k\""}}, src)
}

// TestWellFormedFindsSpareCapacity: the header walk says when a value slice
// has room past its length, which is when keyedHeader caps the copy's
// slices; without it, the copy is the caller's map as it is.
func TestWellFormedFindsSpareCapacity(t *testing.T) {
	t.Parallel()
	req, err := http.NewRequest(http.MethodPost, "http://x/payments", nil)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Add("X-List", "a")
	scan, ok := wellFormed(req)
	require.True(t, ok)
	assert.False(t, scan.spare, "Header.Set and a first Header.Add leave no room")
	req.Header.Add("X-List", "b") // append grows the slice past its length
	scan, ok = wellFormed(req)
	require.True(t, ok)
	assert.Equal(t, cap(req.Header["X-List"]) != 2, scan.spare)
	req.Header["X-Spare"] = make([]string, 1, 4)
	scan, _ = wellFormed(req)
	assert.True(t, scan.spare)
	var vals [2]string
	h := keyedHeader(req.Header, "k", false, time.Minute, scan.spare, &vals)
	assert.Equal(t, 1, cap(h["X-Spare"]))
}

func TestPreferValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{{0, "wait=0"}, {27 * time.Second, "wait=27"}, {59 * time.Second, "wait=59"},
		{60 * time.Second, "wait=60"}, {3600 * time.Second, "wait=3600"}} {
		assert.Equal(t, tc.want, preferValue(tc.d), "%v", tc.d)
	}
}

// BenchmarkKeyedHeader: the header of a keyed attempt, with the caller's key
// (Prefer: wait added) and with a generated one (the key added).
func BenchmarkKeyedHeader(b *testing.B) {
	caller := http.Header{"Content-Type": {"application/json"}, headerKeyName: {"6f1c1f0e-8a8e-4c4e-9a43-2b1d3c4e5f60"}}
	generated := http.Header{"Content-Type": {"application/json"}}
	b.Run("caller key", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var vals [2]string
			_ = keyedHeader(caller, "", true, 30*time.Second, false, &vals)
		}
	})
	b.Run("generated key", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var vals [2]string
			_ = keyedHeader(generated, "6f1c1f0e-8a8e-4c4e-9a43-2b1d3c4e5f60", false, 30*time.Second, false, &vals)
		}
	})
}
