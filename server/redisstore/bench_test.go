package redisstore

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/internal/demo/payments"
	"github.com/idemkit/idem/server"
)

// BenchmarkMiddleware measures POST /payments over loopback HTTP: the bare
// payments handler, then the same handler behind server.Middleware with this
// store, for first requests (a new key each time: claim + finish) and replays
// (one key: claim only), sequentially and in parallel. Each protected case
// reports "x-bare", its ns/op divided by the bare handler's in the same run.
func BenchmarkMiddleware(b *testing.B) {
	c := sharedRedis(b)
	store := New(c, WithPrefix(testPrefix(b, c)))
	api := &payments.API{Ledger: payments.NewMemLedger()}
	mux := http.NewServeMux()
	mux.Handle("POST /bare", http.HandlerFunc(api.Create))
	mux.Handle("POST /payments", server.Middleware(store)(http.HandlerFunc(api.Create)))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := srv.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	const body = `{"customer":"bench","amount":1999,"currency":"EUR"}`

	var seq atomic.Int64
	post := func(b *testing.B, path, key string) {
		r, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if key != "" {
			r.Header.Set(server.HeaderKey, key)
		}
		resp, err := client.Do(r)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	cases := []struct {
		name string
		path string
		key  func() string
	}{
		{"bare", "/bare", func() string { return "" }},
		{"first", "/payments", func() string { return fmt.Sprintf("first-%d", seq.Add(1)) }},
		{"replay", "/payments", func() string { return "replay" }},
	}
	for _, parallel := range []bool{false, true} {
		mode := "sequential"
		if parallel {
			mode = "parallel"
		}
		var bare float64 // ns/op of the bare handler in this mode
		for _, tc := range cases {
			b.Run(mode+"/"+tc.name, func(b *testing.B) {
				if tc.name == "replay" {
					post(b, tc.path, tc.key()) // record it once
				}
				b.ResetTimer()
				if parallel {
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							post(b, tc.path, tc.key())
						}
					})
				} else {
					for b.Loop() {
						post(b, tc.path, tc.key())
					}
				}
				nsop := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				if tc.name == "bare" {
					bare = nsop
				} else if bare > 0 {
					b.ReportMetric(nsop/bare, "x-bare")
				}
			})
		}
	}
}
