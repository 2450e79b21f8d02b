package idem

import (
	"errors"
	"net/http"
	"sync"
	"time"
)

// A keyed attempt that passes WithAttemptTimeout is not cut: the operation
// moves on (backs off, retries, polls) while the attempt goes on, and if that
// attempt's answer comes first and is final, it is the operation's answer.
//
// Why: with a key, the first attempt to reach the server is the one doing the
// work there, and every later attempt of the operation is a duplicate that the
// server can only make wait or answer 409. When a timed-out attempt is still
// running on the server (an answer written late, after the effect), its own
// response is the outcome, and it arrives the moment the server sends it,
// whereas a duplicate learns it a poll later. Cutting the attempt would also
// tell the server that the client left, which lets a handler that stops on
// that (before its write) abandon work that a retry must then start again.
//
// An attempt without a key is cut at its time-out, as before: nothing on the
// server ties its answer to a retry's.

// roundTrip is what one call of the next RoundTripper returned.
type roundTrip struct {
	resp *http.Response
	err  error
}

// errOperationEnded cancels the attempts still going on when their operation
// ends.
var errOperationEnded = errors.New("idem: RoundTrip returned without this attempt's answer")

// lateDrain bounds the time spent draining a late answer that is not used.
const lateDrain = time.Second

// lateAttempts holds the attempts of one operation that outlived their
// time-out, and the first final answer one of them brought.
type lateAttempts struct {
	won chan struct{} // closed when answer is set

	// final says whether an answer ends the operation: its status may not
	// be retried.
	final func(*http.Response) bool

	// settled gets a signal (never blocking) each time a late attempt ends.
	settled chan struct{}

	mu      sync.Mutex
	pending int               // late attempts still waiting for their answer
	running []*boundedAttempt // the late attempts, to cancel when the operation ends
	winner  *boundedAttempt   // the attempt whose answer is kept: never cancelled here
	answer  *http.Response
	ended   bool
}

func newLateAttempts(final func(*http.Response) bool) *lateAttempts {
	return &lateAttempts{won: make(chan struct{}), settled: make(chan struct{}, 1), final: final}
}

// goOn lets an attempt go on after the operation stopped waiting for it: its
// result, when it comes, is offered as the operation's answer if it is final,
// and let go otherwise.
func (l *lateAttempts) goOn(results <-chan roundTrip, b *boundedAttempt) {
	l.mu.Lock()
	ended := l.ended
	if !ended {
		l.running = append(l.running, b)
	}
	l.pending++
	l.mu.Unlock()
	if ended {
		b.cancel(errOperationEnded)
	}
	go func() {
		rt := <-results
		defer l.arrived()
		if rt.err != nil {
			b.cancel(nil)
			return
		}
		if l.final(rt.resp) && rt.resp.Body != nil {
			// The body lives until the caller closes it.
			b.ReadCloser = rt.resp.Body
			rt.resp.Body = b
			if l.offer(rt.resp, b) {
				return
			}
		}
		discard(rt.resp, time.Now().Add(lateDrain))
		b.cancel(nil)
	}()
}

// arrived counts a late attempt that has its answer.
func (l *lateAttempts) arrived() {
	l.mu.Lock()
	l.pending--
	l.mu.Unlock()
	select {
	case l.settled <- struct{}{}:
	default:
	}
}

// waitAnswer waits until a late attempt brings a final answer (true), or
// every late attempt has ended without one, or quit is closed (false).
func (l *lateAttempts) waitAnswer(quit <-chan struct{}) bool {
	for {
		l.mu.Lock()
		taken, pending := l.answer != nil, l.pending
		l.mu.Unlock()
		switch {
		case taken:
			return true
		case pending == 0:
			return false
		}
		select {
		case <-l.won:
			return true
		case <-l.settled:
		case <-quit:
			return false
		}
	}
}

// offer makes resp, from attempt b, the operation's answer unless one was
// already taken or the operation has ended. It reports whether resp was
// taken.
func (l *lateAttempts) offer(resp *http.Response, b *boundedAttempt) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || l.answer != nil {
		return false
	}
	l.answer, l.winner = resp, b
	close(l.won)
	return true
}

// taken returns the late answer once won is closed.
func (l *lateAttempts) taken() *http.Response {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.answer
}

// close is called once, when the operation ends: it cancels every late attempt
// but the one whose answer was taken, and returns that answer (nil if none).
func (l *lateAttempts) close() *http.Response {
	l.mu.Lock()
	l.ended = true
	running, winner, answer := l.running, l.winner, l.answer
	l.running = nil
	l.mu.Unlock()
	for _, b := range running {
		if b != winner {
			b.cancel(errOperationEnded)
		}
	}
	return answer
}
