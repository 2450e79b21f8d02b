package bench

import (
	"net/http"
	"time"

	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/hashicorp/go-retryablehttp"

	"github.com/idemkit/idem"
)

// Contender is one client stack measured on the success path: it wraps next, the
// transport that actually talks to the server, in its retry layer.
type Contender struct {
	Name string
	// New returns a client whose retry layer (if any) sends through next.
	New func(next http.RoundTripper) *http.Client
	// Capped, if set, returns the same client bounding every operation by
	// itself to bound (idem's WithMaxElapsed), for the OwnCap cases: it then
	// runs without a caller deadline, and the stacks without Capped get bound
	// as a context deadline.
	Capped func(next http.RoundTripper, bound time.Duration) *http.Client
}

// OverheadContenders returns the client stacks of section 1, each configured as
// its users would in production: retries on (five attempts in all, exponential
// backoff), no logging.
//
//   - bare: the http.Transport alone, the baseline.
//   - idem: idem.NewTransport with its defaults (an Idempotency-Key is generated
//     for every POST, so the POST is retryable); in the OwnCap cases with
//     WithMaxElapsed set to the bound the others get as a context deadline.
//   - go-retryablehttp: retryablehttp.NewClient with its default logger removed,
//     used through StandardClient so that every contender is an *http.Client.
//   - failsafe-go: failsafehttp.NewRoundTripper with failsafehttp's retry policy
//     (five attempts, 300 ms..10 s exponential backoff).
func OverheadContenders() []Contender {
	return []Contender{
		{Name: "bare", New: func(next http.RoundTripper) *http.Client {
			return &http.Client{Transport: next}
		}},
		{Name: "idem", New: func(next http.RoundTripper) *http.Client {
			return &http.Client{Transport: idem.NewTransport(next)}
		}, Capped: func(next http.RoundTripper, bound time.Duration) *http.Client {
			return &http.Client{Transport: idem.NewTransport(next, idem.WithMaxElapsed(bound))}
		}},
		{Name: "go-retryablehttp", New: func(next http.RoundTripper) *http.Client {
			return newRetryableHTTP(next).StandardClient()
		}},
		{Name: "failsafe-go", New: func(next http.RoundTripper) *http.Client {
			policy := failsafehttp.NewRetryPolicyBuilder().
				WithMaxAttempts(5).
				WithBackoff(300*time.Millisecond, 10*time.Second).
				Build()
			return &http.Client{Transport: failsafehttp.NewRoundTripper(next, policy)}
		}},
	}
}

// newRetryableHTTP returns go-retryablehttp's default client (four retries,
// 1..30 s backoff, its default retry policy) sending through next, with its
// default logger, which writes every request to stderr, switched off.
func newRetryableHTTP(next http.RoundTripper) *retryablehttp.Client {
	rc := retryablehttp.NewClient()
	rc.Logger = nil
	rc.HTTPClient = &http.Client{Transport: next}
	return rc
}

// newBaseTransport returns the http.Transport every contender sends through: the
// defaults, with enough idle connections per host for the concurrent sections.
func newBaseTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 256
	return t
}
