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

// errAnswered ends a wait of the operation when a late attempt has answered.
var errAnswered = errors.New("idem: a late attempt answered")

// errOperationEnded cancels the attempts still going on when their operation
// ends.
var errOperationEnded = errors.New("idem: the operation ended")

// lateDrain bounds the time spent draining a late answer that is not used.
const lateDrain = time.Second

// lateAttempts holds the attempts of one operation that outlived their
// time-out, and the first final answer one of them brought.
type lateAttempts struct {
	won chan struct{} // closed when answer is set

	// What says whether an answer is final (see final).
	method             string
	keyed, retryUnsent bool

	mu      sync.Mutex
	running []*boundedAttempt // the late attempts, to cancel when the operation ends
	winner  *boundedAttempt   // the attempt whose answer is kept: never cancelled here
	answer  *http.Response
	ended   bool
}

func newLateAttempts(method string, keyed, retryUnsent bool) *lateAttempts {
	return &lateAttempts{won: make(chan struct{}), method: method, keyed: keyed, retryUnsent: retryUnsent}
}

// final reports whether a response with this status ends the operation: it
// may not be retried.
func (l *lateAttempts) final(status int) bool {
	reason, _ := classify(l.method, l.keyed, l.retryUnsent, outcome{status: status})
	return reason == 0
}

// goOn lets an attempt go on after the operation stopped waiting for it: its
// result, when it comes, is offered as the operation's answer if it is final,
// and let go otherwise.
func (l *lateAttempts) goOn(done <-chan roundTrip, b *boundedAttempt) {
	l.mu.Lock()
	ended := l.ended
	if !ended {
		l.running = append(l.running, b)
	}
	l.mu.Unlock()
	if ended {
		b.cancel(errOperationEnded)
	}
	go func() {
		rt := <-done
		if rt.err != nil {
			b.cancel(nil)
			return
		}
		if l.final(rt.resp.StatusCode) && rt.resp.Body != nil {
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

// result returns the late answer once won is closed.
func (l *lateAttempts) result() *http.Response {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.answer
}

// end is called once, when the operation ends: it cancels every late attempt
// but the one whose answer was taken, and returns that answer (nil if none).
func (l *lateAttempts) end() *http.Response {
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

// settle decides what the operation returns once its loop has ended with resp
// and err: a late attempt's final answer taken meanwhile wins over the loop's
// result, unless the loop ended because the caller's context did. What is not
// returned is let go.
func (o *operation) settle(resp *http.Response, err error) (*http.Response, error) {
	if o.late == nil {
		return resp, err
	}
	answer := o.late.end()
	if answer == nil || answer == resp {
		return resp, err
	}
	if err != nil && o.ctx.Err() != nil {
		discard(answer, time.Now().Add(lateDrain))
		return resp, err
	}
	if resp != nil {
		discard(resp, time.Now().Add(lateDrain))
	}
	return answer, nil
}

// attemptGoesOn makes a keyed attempt bounded by WithAttemptTimeout (b.after):
// the round trip runs in a goroutine, and when the bound passes first, the
// attempt is handed to o.late to go on, and counts as timed out. When another
// late attempt answers meanwhile, this one is handed over too, and the result
// says so.
func (o *operation) attemptGoesOn(req *http.Request, b *boundedAttempt, start time.Time) attemptResult {
	done := make(chan roundTrip, 1)
	rt := o.t.transport()
	go func() {
		resp, err := rt.RoundTrip(req)
		done <- roundTrip{resp, err}
	}()
	timer := time.NewTimer(b.after)
	defer timer.Stop()
	select {
	case r := <-done:
		return o.answered(start, b, r.resp, r.err)
	case <-timer.C:
		o.late.goOn(done, b)
		return attemptResult{outcome: outcome{err: &attemptTimeoutError{after: b.after}, timedOut: true}}
	case <-o.late.won:
		o.late.goOn(done, b)
		return attemptResult{superseded: true}
	}
}
