package main

import (
	"net/http"
	"sync/atomic"

	"github.com/idemkit/idem/server/chaos"
)

// slowFirst is an http.RoundTripper that asks the server, with the
// Chaos-Delay header, to be slow on the first request it sends, and only
// that one: the transient fault of the story.
type slowFirst struct {
	next  http.RoundTripper
	delay string // a Chaos-Delay value, such as "1.5s"
	used  atomic.Bool
}

func (s *slowFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	if s.used.Swap(true) {
		return s.next.RoundTrip(r)
	}
	r = r.Clone(r.Context()) // a RoundTripper must not modify its caller's request
	r.Header.Set(chaos.HeaderDelay, s.delay)
	return s.next.RoundTrip(r)
}
