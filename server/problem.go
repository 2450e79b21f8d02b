package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
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
	ProblemNotRecorded      = ProblemBase + "not-recorded"
	ProblemUnprotectable    = ProblemBase + "unprotectable"
	ProblemUnauthenticated  = ProblemBase + "unauthenticated"
	ProblemBodyUnreadable   = ProblemBase + "body-unreadable"
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

// WriteProblem sends p as application/problem+json with Cache-Control: no-store.
func WriteProblem(w http.ResponseWriter, p Problem) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(retryAfterSeconds(p.RetryAfter), 10))
	}
	body, err := json.Marshal(p)
	if err != nil { // cannot happen: every field is a string or an int
		body = []byte(`{"title":"internal error","status":500}`)
	}
	body = append(body, '\n')
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// retryAfterSeconds rounds d up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}
