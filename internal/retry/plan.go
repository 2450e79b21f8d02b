package retry

import (
	"log/slog"
	"time"

	"github.com/idemkit/idem/internal/jitter"
)

// Plan is what one operation may do, fixed when it starts: its bounds, its
// backoff, what its request allows, and what its retries are paid from.
type Plan struct {
	Start time.Time // when the operation began: its cap runs from there
	// FirstAt is when the first attempt starts, when the driver has just
	// read the clock for it (zero: the engine reads the clock). A driver
	// that has done nothing since it read Start gives Start.
	FirstAt time.Time
	Bounds  Bounds
	Backoff Backoff
	Request Request
	Limit   Limit          // what retries are paid from; nil: NoLimit
	Host    string         // the host a Retry-After holds back, through Limit
	Rand    func() float64 // uniform numbers in [0, 1): the jitter and the spreads

	Logger   *slog.Logger       // nil: no logging
	LogAttrs func() []slog.Attr // the attributes of every line the engine logs for the operation
}

// Bounds are the limits of one operation.
type Bounds struct {
	MaxAttempts    int           // attempts, the first included (polls aside)
	MaxElapsed     time.Duration // the cap, from Plan.Start
	MaxRetryAfter  time.Duration // the longest Retry-After waited for
	AttemptTimeout time.Duration // how long an attempt waits for its answer, 0: no bound of its own
}

// Backoff is the exponential backoff of the waits between retries.
type Backoff struct {
	Jitter    jitter.Kind
	Base, Max time.Duration
}

// Request is what the operation's request allows.
type Request struct {
	Keyed      bool // it carries an idempotency key
	FreshKey   bool // that key was generated for this operation: no server can have it in progress yet
	Repeatable bool // it may be repeated without a key (an idempotent method)
	Replayable bool // its body can be sent again
	Mismatch   bool // its body is not its announced length: sent once, to fail as the transport fails
}

// Attempt is what the engine tells a driver of the attempt to make.
type Attempt struct {
	Number int           // 1 for the first
	Reason string        // why the previous attempt was retried, "" for the first
	Wait   time.Duration // how long the operation waited before it
	Poll   bool          // it asks again for the answer after an InProgress
	Fresh  bool          // the first attempt under a key generated for the operation
	Prev   Outcome       // what the previous attempt came to, zero for the first
	Start  time.Time     // now, when it starts (Retry-After dates are read against it)
	// Bound is how long it may wait for its answer's start (0: no bound of
	// the engine's, the caller's context bounds it), and Capped says the
	// bound is the cap's.
	Bound  time.Duration
	Capped bool
	Limit  time.Duration // how long it can wait for its answer at most (its bound, or the deadline)
}

// Driver is a transport's side of an operation: it makes the attempts and
// holds what they bring; the engine decides.
type Driver interface {
	// Attempt makes the attempt a, and returns what it came to; superseded
	// when an earlier attempt, going on past its time-out, answered meanwhile.
	Attempt(a Attempt) (out Outcome, superseded bool)
	// Rewind readies the request to be sent again; an error means it cannot
	// be (the operation ends with ErrBodyNotReplayable).
	Rewind() error
	// Unsent lets go of what was readied for an attempt that will not be
	// made (before the first one: the caller's request body).
	Unsent()
	// Release lets go of the latest attempt's answer, taking no longer than
	// until: it will not be returned.
	Release(until time.Time)
	// Answered is closed when an attempt going on past its time-out brought
	// the answer (nil: never).
	Answered() <-chan struct{}
	// Retrying is told of each retry before its wait (the caller's hooks).
	Retrying(n Notice)
}

// Notice is what a driver is told of a retry about to be waited for.
type Notice struct {
	Next  Attempt       // Number, Reason, Wait, Poll and Prev of the next attempt
	Delay time.Duration // the wait about to start
}

// NoLimit pays for every retry and holds no host back.
var NoLimit Limit = noLimit{}
