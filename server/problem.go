package server

import (
	"net/http"
	"time"

	"github.com/idemkit/idem/internal/problem"
)

// ProblemBase is the prefix of every problem type URI idem uses. The IETF
// Idempotency-Key draft registers none, so these are idem's own and stable:
// each names a section of docs/problems.md.
const ProblemBase = "https://github.com/idemkit/idem/blob/main/docs/problems.md#"

// Problem type URIs, one per case the middleware answers itself.
const (
	ProblemMissingKey       = ProblemBase + "missing-key"
	ProblemInvalidKey       = ProblemBase + "invalid-key"
	ProblemMismatch         = ProblemBase + "key-reused"
	ProblemInProgress       = ProblemBase + "in-progress"
	ProblemBodyTooLarge     = ProblemBase + "body-too-large"
	ProblemStoreUnavailable = ProblemBase + "store-unavailable"
	ProblemOutcomeUnknown   = ProblemBase + "outcome-unknown"
	ProblemUnprotectable    = ProblemBase + "unprotectable"
	ProblemUnauthenticated  = ProblemBase + "unauthenticated"
	ProblemBodyUnreadable   = ProblemBase + "body-unreadable"
	ProblemNotAcceptable    = ProblemBase + "not-acceptable"
)

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// RetryAfter, when positive, is sent as the Retry-After header in whole
	// seconds (rounded up, at least 1); it is not part of the JSON body.
	RetryAfter time.Duration `json:"-"`
}

// writeProblem sends p as application/problem+json with Cache-Control: no-store.
func writeProblem(w http.ResponseWriter, p Problem) {
	problem.Write(w, problem.Details(p))
}
