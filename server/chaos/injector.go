package chaos

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idem/internal/problem"
	"github.com/idemkit/idem/server"
)

// ProblemInjected is the problem type of a Chaos-Fail answer, and
// ProblemBadHeader that of a malformed chaos header.
const (
	ProblemInjected  = server.ProblemBase + "chaos-injected"
	ProblemBadHeader = server.ProblemBase + "chaos-bad-header"
)

// An Injector decides the faults of each request and applies them. It is
// immutable and safe for concurrent use.
type Injector struct {
	cfg config
}

// New returns an Injector. It panics on a nil Option; the options themselves
// panic when created with an impossible setting.
func New(opts ...Option) *Injector {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			panic("chaos: New(nil Option): want an Option")
		}
		o(&cfg)
	}
	return &Injector{cfg: cfg}
}

type planKey struct{}

// Wrap returns a handler that chooses the faults of each request from its
// headers and the random rates, answers Chaos-Fail itself, arranges
// Chaos-Drop around next, and passes the rest to the hooks (BeforeWrite,
// AfterWrite) through the request's context. Put it outside the idempotency
// middleware.
func (in *Injector) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := in.plan(r)
		if err != nil {
			problem.Write(w, problem.Details{Type: ProblemBadHeader, Title: "Invalid chaos header",
				Status: http.StatusBadRequest, Detail: err.Error()})
			return
		}
		if p.fail != 0 {
			if p.retryAfter >= 0 {
				w.Header().Set("Retry-After", strconv.Itoa(p.retryAfter))
			}
			problem.Write(w, problem.Details{Type: ProblemInjected, Title: "Injected fault",
				Status: p.fail, Detail: fmt.Sprintf("chaos: failed with %d before doing any work", p.fail)})
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), planKey{}, p))
		if !p.drop {
			next.ServeHTTP(w, r)
			return
		}
		dw := &dropWriter{ResponseWriter: w}
		next.ServeHTTP(dw, r)
		dw.drop() // a handler that wrote nothing is dropped too
	})
}

// plan reads the headers (when enabled) and adds the random faults.
func (in *Injector) plan(r *http.Request) (plan, error) {
	p := plan{retryAfter: -1}
	if in.cfg.headers {
		var err error
		if p, err = parseHeaders(r.Header); err != nil {
			return plan{}, err
		}
	}
	if p.fail == 0 && in.cfg.failRate > 0 && in.cfg.rand() < in.cfg.failRate {
		p.fail, p.retryAfter = http.StatusServiceUnavailable, 1
	}
	if !p.drop && in.cfg.dropRate > 0 && in.cfg.rand() < in.cfg.dropRate {
		p.drop = true
	}
	if !p.delaySet && in.cfg.delayMax > 0 {
		p.delay = time.Duration(in.cfg.rand() * float64(in.cfg.delayMax))
	}
	return p, nil
}

// BeforeWrite is a payments.API hook: it sleeps for the request's chosen delay,
// and returns the context's error if the request ends first (the API then
// answers 503 and writes nothing).
func (in *Injector) BeforeWrite(r *http.Request) error {
	p, _ := r.Context().Value(planKey{}).(plan)
	if p.delay <= 0 {
		return nil
	}
	t := time.NewTimer(p.delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-r.Context().Done():
		return fmt.Errorf("chaos: delay interrupted: %w", context.Cause(r.Context()))
	}
}

// AfterWrite is a payments.API hook. For a request that asked for
// Chaos-Delay-After-Write it sleeps that long, ignoring the request's context:
// the work is done and the server is only slow to answer, so a client that
// times out and hangs up meanwhile does not undo it. Then, for a request that
// asked for Chaos-Crash, it runs the crash function (WithCrash).
func (in *Injector) AfterWrite(r *http.Request) {
	p, _ := r.Context().Value(planKey{}).(plan)
	if p.afterWrite > 0 {
		in.cfg.sleep(p.afterWrite)
	}
	if p.crash {
		in.cfg.crash()
	}
}
