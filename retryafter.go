package idem

import (
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/httpfield"
)

// maxRetryAfterSeconds is where parseRetryAfter saturates: 2^31 seconds (about 68
// years), the value RFC 9111 §1.2.2 prescribes for a delta-seconds too large to
// represent. As a Duration it leaves room to add jitter without overflowing.
const maxRetryAfterSeconds = 1 << 31

// maxRetryAfter is maxRetryAfterSeconds as a Duration.
const maxRetryAfter = maxRetryAfterSeconds * time.Second

// parseRetryAfter parses a Retry-After header value (RFC 9110 §10.2.3) and returns
// the wait it asks for, relative to now, and true; or 0 and false when the value is
// malformed.
//
// The value is either delta-seconds (one or more ASCII digits; leading zeros are
// allowed) or an HTTP-date in any form http.ParseTime accepts (IMF-fixdate, RFC 850,
// asctime). Spaces and tabs around it (OWS) are ignored. A date at or before now
// gives 0 and true. Signs, fractions, exponents, empty or blank values and anything
// else are rejected.
//
// The result is never negative and never more than 2^31 seconds (about 68 years):
// a larger delta-seconds, however many digits it has, or a date further ahead,
// saturates there, as RFC 9111 §1.2.2 prescribes for delta-seconds, rather than
// overflowing. Callers cap it further (the Transport by WithMaxRetryAfter).
func parseRetryAfter(value string, now time.Time) (time.Duration, bool) {
	value = strings.Trim(value, " \t")
	if value == "" {
		return 0, false
	}
	if secs, ok := httpfield.DeltaSeconds(value, maxRetryAfterSeconds); ok {
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(value)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now) // saturates at the Duration limits
	if d <= 0 {
		return 0, true
	}
	return min(d, maxRetryAfter), true
}
