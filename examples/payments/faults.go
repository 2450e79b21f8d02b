package main

import (
	"net/http"
	"sync"

	"github.com/idemkit/idem/server/chaos"
)

// sender is the http.RoundTripper under each client of the stories. It asks
// the server, with the Chaos-Delay header, to be slow on the first request it
// sends, and only that one: the transient fault of the story. It also numbers
// the requests it sends, so that the transcript can say which attempt a
// response answers.
type sender struct {
	next  http.RoundTripper
	delay string // a Chaos-Delay value for the first request, such as "1s"; "" for none

	mu   sync.Mutex
	sent []*http.Request // in the order sent
}

func (s *sender) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	if len(s.sent) == 0 && s.delay != "" {
		r = r.Clone(r.Context()) // a RoundTripper must not modify its caller's request
		r.Header.Set(chaos.HeaderDelay, s.delay)
	}
	s.sent = append(s.sent, r)
	s.mu.Unlock()
	return s.next.RoundTrip(r)
}

// count returns how many requests were sent.
func (s *sender) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sent)
}

// attempt returns the number (from 1) of the request that resp answers, or 0
// if this sender did not send it.
func (s *sender) attempt(resp *http.Response) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range s.sent {
		if r == resp.Request {
			return i + 1
		}
	}
	return 0
}
