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

// BenchmarkTransport measures the success path of a POST against a local
// server: "rt=bare" is a plain http.Transport sending the request with its key
// already on the header, "rt=idem" the same http.Transport wrapped in a
// Transport, in the same run (compare them with `benchstat -col /rt`), and
// "rt=paired" alternates the two in every iteration and reports idem/bare, the
// ratio of their times. Target: < 3% more time, <= 4 more allocs/op.
// "key=caller" puts the key on the request's header, "key=auto" leaves it to
// the default generator (a UUIDv4, and the header copy it needs);
// "deadline=yes" gives each request a 10 s context deadline, inside the 30 s
// WithMaxElapsed cap, "deadline=no" none, so the Transport bounds the first
// attempt itself.
//
// bench/ section 1 measures the same configurations, http.Client.Timeout
// included, beside go-retryablehttp in one run; see TestHotPathAllocs for the
// allocations the Transport itself adds.
func BenchmarkTransport(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"pay_123","status":"succeeded"}`))
	}))
	defer srv.Close()
	payload := []byte(`{"amount":1000,"currency":"eur","source":"tok_visa"}`)
	const key = "6f1c1f0e-8a8e-4c4e-9a43-2b1d3c4e5f60"

	do := func(b *testing.B, rt http.RoundTripper, withKey, deadline bool) {
		ctx, cancel := context.Background(), context.CancelFunc(nil)
		if deadline {
			ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/payments", bytes.NewReader(payload))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if withKey {
			req.Header.Set(headerKeyName, key)
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if cancel != nil {
			cancel()
		}
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	run := func(b *testing.B, rt http.RoundTripper, withKey, deadline bool) {
		b.ReportAllocs()
		for b.Loop() {
			do(b, rt, withKey, deadline)
		}
	}
	for _, bc := range []struct {
		name     string
		autoKey  bool
		deadline bool
	}{
		{"key=caller/deadline=yes", false, true},
		{"key=caller/deadline=no", false, false},
		{"key=auto/deadline=yes", true, true},
		{"key=auto/deadline=no", true, false},
	} {
		b.Run(bc.name+"/rt=bare", func(b *testing.B) {
			tr := &http.Transport{MaxIdleConnsPerHost: 4}
			defer tr.CloseIdleConnections()
			run(b, tr, true, bc.deadline)
		})
		b.Run(bc.name+"/rt=idem", func(b *testing.B) {
			tr := &http.Transport{MaxIdleConnsPerHost: 4}
			defer tr.CloseIdleConnections()
			run(b, NewTransport(tr), !bc.autoKey, bc.deadline)
		})
		// "rt=paired" alternates a bare and an idem request in every
		// iteration and reports the ratio of their times, so that load
		// from elsewhere on the machine weighs on both alike.
		b.Run(bc.name+"/rt=paired", func(b *testing.B) {
			bareTr := &http.Transport{MaxIdleConnsPerHost: 4}
			defer bareTr.CloseIdleConnections()
			tr := &http.Transport{MaxIdleConnsPerHost: 4}
			defer tr.CloseIdleConnections()
			idem := NewTransport(tr)
			var bare, wrapped time.Duration
			for b.Loop() {
				t0 := time.Now()
				do(b, bareTr, true, bc.deadline)
				t1 := time.Now()
				do(b, idem, !bc.autoKey, bc.deadline)
				wrapped += time.Since(t1)
				bare += t1.Sub(t0)
			}
			b.ReportMetric(float64(wrapped)/float64(bare), "idem/bare")
			b.ReportMetric(float64(wrapped-bare)/float64(b.N), "added-ns/op")
		})
	}
}

// TestHotPathAllocs pins the allocations the Transport itself adds to a POST
// that succeeds, with an in-memory next RoundTripper. A keyed attempt is a
// copy of the caller's request, with its context (which carries the
// attempt's AttemptInfo) and the values of the headers it adds, in one
// allocation (attemptParts), and a copy of the caller's header, to which it
// adds Prefer: wait (and the key when the Transport adds it): the map and its
// table, 3 with the key on the request and a caller's deadline inside the
// WithMaxElapsed cap (an http.Client with Timeout, or a request deadline),
// which bounds the attempt. Without a deadline the Transport bounds the first
// attempt itself so that the operation ends within its cap, with plain code:
// context.WithCancelCause (2), a time.AfterFunc timer and its function (the
// boundedAttempt that holds the cancel function and wraps the response body
// is in attemptParts): 7. A generated key adds its string (newKey) and needs
// no Prefer on its first attempt (no server can have it in progress): one
// more in all. bench/ section 1 compares the same configurations with
// go-retryablehttp over loopback.
func TestHotPathAllocs(t *testing.T) {
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}
	next := roundTripFunc(func(*http.Request) (*http.Response, error) { return resp, nil })
	tr := NewTransport(next)
	for _, tc := range []struct {
		name     string
		key      bool
		deadline bool
		max      float64
	}{
		{"caller key, caller deadline inside the cap", true, true, 3},
		{"caller key, no caller deadline", true, false, 7},
		{"generated key, caller deadline inside the cap", false, true, 4},
		{"generated key, no caller deadline", false, false, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.deadline {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://x/", bytes.NewReader([]byte("{}")))
			req.Header.Set("Content-Type", "application/json")
			if tc.key {
				req.Header.Set(headerKeyName, "k-123")
			}
			allocs := testing.AllocsPerRun(100, func() {
				r, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				_ = r.Body.Close()
			})
			t.Logf("%v allocs per POST", allocs)
			if !tc.key && raceEnabled {
				tc.max++ // crypto/rand.Read's buffer escapes under the race detector (newKey)
			}
			if allocs > tc.max {
				t.Errorf("%v allocs per POST on the success path, want <= %v", allocs, tc.max)
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
	req.Header.Set(headerKeyName, "6f1c1f0e-8a8e-4c4e-9a43-2b1d3c4e5f60")
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
