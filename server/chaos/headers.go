package chaos

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Request headers that ask for a fault.
const (
	HeaderDelay           = "Chaos-Delay"
	HeaderDelayAfterWrite = "Chaos-Delay-After-Write"
	HeaderFail            = "Chaos-Fail"
	HeaderRetryAfter      = "Chaos-Retry-After"
	HeaderCrash           = "Chaos-Crash"
	HeaderDrop            = "Chaos-Drop"
)

// Accepted values and bounds of the headers.
const (
	CrashAfterWrite = "after-write"
	DropAfterRecord = "after-record"
	// MaxDelay bounds Chaos-Delay, Chaos-Delay-After-Write and WithDelayMax.
	MaxDelay = time.Minute
	// MaxRetryAfter bounds Chaos-Retry-After, in seconds (one day).
	MaxRetryAfter = 86400
)

// ErrBadHeader is matched (errors.Is) by every *HeaderError.
var ErrBadHeader = errors.New("chaos: bad header")

// HeaderError reports a malformed chaos header.
type HeaderError struct {
	Header string // canonical header name
	Value  string // the value received; empty when the header is repeated
	Reason string // what is expected instead
}

func (e *HeaderError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("chaos: header %s: %s", e.Header, e.Reason)
	}
	return fmt.Sprintf("chaos: header %s: %q: %s", e.Header, e.Value, e.Reason)
}

// Is reports whether target is ErrBadHeader.
func (e *HeaderError) Is(target error) bool { return target == ErrBadHeader }

// plan is the set of faults chosen for one request.
type plan struct {
	delay      time.Duration
	delaySet   bool          // Chaos-Delay was given (0s included): no random delay
	afterWrite time.Duration // sleep after the business write, whatever the request's context
	fail       int           // status to answer; 0 for none
	retryAfter int           // seconds; -1 for no Retry-After header
	crash      bool
	drop       bool
}

// headerParsers read each header into a plan, in this order (Chaos-Retry-After
// needs Chaos-Fail first).
var headerParsers = []struct {
	name  string
	parse func(p *plan, v string) error
}{
	{HeaderDelay, parseDelay},
	{HeaderDelayAfterWrite, parseDelayAfterWrite},
	{HeaderFail, parseFail},
	{HeaderRetryAfter, parseRetryAfter},
	{HeaderCrash, parseCrash},
	{HeaderDrop, parseDrop},
}

// parseHeaders reads the chaos headers of h. An absent header asks for nothing;
// a repeated one is an error.
func parseHeaders(h http.Header) (plan, error) {
	p := plan{retryAfter: -1}
	for _, hp := range headerParsers {
		vs := h.Values(hp.name)
		switch {
		case len(vs) == 0:
			continue
		case len(vs) > 1:
			return plan{}, &HeaderError{Header: hp.name, Reason: fmt.Sprintf("given %d times; give it once", len(vs))}
		}
		if err := hp.parse(&p, vs[0]); err != nil {
			return plan{}, err
		}
	}
	return p, nil
}

func parseDelay(p *plan, v string) error {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > MaxDelay {
		return badHeader(HeaderDelay, v, fmt.Sprintf("want a duration from 0s to %v, e.g. 800ms", MaxDelay))
	}
	p.delay, p.delaySet = d, true
	return nil
}

func parseDelayAfterWrite(p *plan, v string) error {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > MaxDelay {
		return badHeader(HeaderDelayAfterWrite, v, fmt.Sprintf("want a duration from 0s to %v, e.g. 800ms", MaxDelay))
	}
	p.afterWrite = d
	return nil
}

func parseFail(p *plan, v string) error {
	n, err := strictInt(v)
	if err != nil || n < 400 || n > 599 {
		return badHeader(HeaderFail, v, "want an HTTP error status from 400 to 599, e.g. 503")
	}
	p.fail = n
	return nil
}

func parseRetryAfter(p *plan, v string) error {
	if p.fail == 0 {
		return badHeader(HeaderRetryAfter, v, "only meaningful with "+HeaderFail)
	}
	n, err := strictInt(v)
	if err != nil || n > MaxRetryAfter {
		return badHeader(HeaderRetryAfter, v, fmt.Sprintf("want whole seconds from 0 to %d", MaxRetryAfter))
	}
	p.retryAfter = n
	return nil
}

func parseCrash(p *plan, v string) error {
	if v != CrashAfterWrite {
		return badHeader(HeaderCrash, v, "the only value is "+CrashAfterWrite)
	}
	p.crash = true
	return nil
}

func parseDrop(p *plan, v string) error {
	if v != DropAfterRecord {
		return badHeader(HeaderDrop, v, "the only value is "+DropAfterRecord)
	}
	p.drop = true
	return nil
}

// strictInt parses 1 to 6 ASCII digits (no sign, no spaces).
func strictInt(v string) (int, error) {
	if len(v) == 0 || len(v) > 6 {
		return 0, strconv.ErrSyntax
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, strconv.ErrSyntax
		}
	}
	return strconv.Atoi(v)
}

func badHeader(name, value, want string) error {
	return &HeaderError{Header: name, Value: value, Reason: want}
}
