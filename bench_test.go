package idem

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkTransport measures the success path of a keyed POST against a local
// server: "bare" is a plain http.Transport, "idem" the same wrapped in a
// Transport, in the same run; compare them (target: < 3% more time, <= 4 more
// allocs/op). "idem-autokey" adds the generation of a UUIDv4 key and the
// header copy it needs.
func BenchmarkTransport(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"pay_123","status":"succeeded"}`))
	}))
	defer srv.Close()
	payload := []byte(`{"amount":1000,"currency":"eur","source":"tok_visa"}`)
	const key = "6f1c1f0e-8a8e-4c4e-9a43-2b1d3c4e5f60"

	run := func(b *testing.B, rt http.RoundTripper, withKey bool) {
		b.ReportAllocs()
		for b.Loop() {
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/payments", bytes.NewReader(payload))
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if withKey {
				req.Header.Set(HeaderIdempotencyKey, key)
			}
			resp, err := rt.RoundTrip(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	}
	b.Run("bare", func(b *testing.B) {
		tr := &http.Transport{MaxIdleConnsPerHost: 4}
		defer tr.CloseIdleConnections()
		run(b, tr, true)
	})
	b.Run("idem", func(b *testing.B) {
		tr := &http.Transport{MaxIdleConnsPerHost: 4}
		defer tr.CloseIdleConnections()
		run(b, NewTransport(tr), true)
	})
	b.Run("idem-autokey", func(b *testing.B) {
		tr := &http.Transport{MaxIdleConnsPerHost: 4}
		defer tr.CloseIdleConnections()
		run(b, NewTransport(tr), false)
	})
}

// TestHotPathAllocs pins the allocations the Transport adds to a keyed POST
// that succeeds. When the caller's context ends before the WithMaxElapsed cap
// (an http.Client with Timeout, or a request deadline) the context bounds the
// attempt and the Transport adds nothing. Without one, the Transport must bound
// the first attempt itself so the operation ends within its cap: a cancellable
// context, its timer, the request copy that carries it and the body wrapper
// that cancels it when the body is closed.
func TestHotPathAllocs(t *testing.T) {
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}
	next := roundTripFunc(func(*http.Request) (*http.Response, error) { return resp, nil })
	tr := NewTransport(next)
	for _, tc := range []struct {
		name     string
		deadline bool
		max      float64
	}{
		{"caller deadline inside the cap", true, 0},
		{"no caller deadline", false, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.deadline {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://x/", bytes.NewReader([]byte("{}")))
			req.Header.Set(HeaderIdempotencyKey, "k-123")
			allocs := testing.AllocsPerRun(100, func() {
				r, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				_ = r.Body.Close()
			})
			if allocs > tc.max {
				t.Errorf("%v allocs per keyed POST on the success path, want <= %v", allocs, tc.max)
			}
		})
	}
}

// BenchmarkTransportOverhead isolates the Transport's own cost on the success
// path, with an in-memory next RoundTripper: "bare" calls it directly, "idem"
// through a Transport. The difference is the time the Transport adds to every
// request; divide it by BenchmarkTransport/bare for the relative overhead.
func BenchmarkTransportOverhead(b *testing.B) {
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}
	next := roundTripFunc(func(*http.Request) (*http.Response, error) { return resp, nil })
	req, _ := http.NewRequest(http.MethodPost, "http://x/payments", bytes.NewReader([]byte("{}")))
	req.Header.Set(HeaderIdempotencyKey, "6f1c1f0e-8a8e-4c4e-9a43-2b1d3c4e5f60")
	for _, bc := range []struct {
		name string
		rt   http.RoundTripper
	}{{"bare", next}, {"idem", NewTransport(next)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.rt.RoundTrip(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
