package bench

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// BenchmarkOverhead measures the success path of every client stack against one
// local server, in every case of OverheadCases, in the same run; compare each
// with "bare" of the same case:
//
//	go test -run '^$' -bench Overhead -benchmem -count 5
func BenchmarkOverhead(b *testing.B) {
	srv := newOverheadServer()
	defer srv.Close()
	for _, cs := range OverheadCases() {
		for _, c := range OverheadContenders() {
			b.Run(cs.String()+"/"+c.Name, func(b *testing.B) {
				if err := benchContender(b, c, Loopback, srv.URL, cs); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkOverheadInMemory measures the same client stacks over a
// RoundTripper that answers in memory, which leaves only the retry layer's own
// cost (and the shared cost of building the request and reading the reply).
func BenchmarkOverheadInMemory(b *testing.B) {
	for _, cs := range OverheadCases() {
		for _, c := range OverheadContenders() {
			b.Run(cs.String()+"/"+c.Name, func(b *testing.B) {
				if err := benchContender(b, c, InMemory, "http://in-memory.invalid/payments", cs); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkOverheadPaired alternates one POST through idem and one through
// go-retryablehttp in every iteration, in every case of OverheadCases, and
// reports the ratio of their times: load from elsewhere on the machine weighs
// on both alike, so the ratio is steadier than two separate benchmarks.
//
//	go test -run '^$' -bench OverheadPaired -count 5
func BenchmarkOverheadPaired(b *testing.B) {
	srv := newOverheadServer()
	defer srv.Close()
	var idemC, rhC Contender
	for _, c := range OverheadContenders() {
		switch c.Name {
		case "idem":
			idemC = c
		case "go-retryablehttp":
			rhC = c
		}
	}
	for _, cs := range OverheadCases() {
		b.Run(cs.String(), func(b *testing.B) {
			a, pa := pairedClient(idemC, cs)
			r, pr := pairedClient(rhC, cs)
			defer pa()
			defer pr()
			key := ""
			if cs.CallerKey {
				key = overheadKey
			}
			var deadline time.Duration
			if cs.Deadline == ContextDeadline {
				deadline = overheadTimeout
			}
			ctx := context.Background()
			var ta, tr time.Duration
			for b.Loop() {
				t0 := time.Now()
				if err := postPayment(ctx, a, srv.URL, key, deadline); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := postPayment(ctx, r, srv.URL, key, deadline); err != nil {
					b.Fatal(err)
				}
				ta += t1.Sub(t0)
				tr += time.Since(t1)
			}
			b.ReportMetric(float64(ta)/float64(tr), "idem/go-retryablehttp")
		})
	}
}

// pairedClient returns c's client over its own loopback transport, set up
// for case cs, and a function that closes its idle connections.
func pairedClient(c Contender, cs OverheadCase) (*http.Client, func()) {
	tr := newBaseTransport()
	client := c.New(tr)
	if cs.Deadline == ClientTimeout {
		client.Timeout = overheadTimeout
	}
	return client, tr.CloseIdleConnections
}
