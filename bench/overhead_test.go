package bench

import "testing"

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
