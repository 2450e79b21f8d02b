// Package problem writes RFC 9457 problem details. It is the one writer that
// the middleware (server), the fault injector (server/chaos) and the demo
// (internal/demo) share, so every problem answer of idem has the same headers.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Details is an RFC 9457 problem details object. server.Problem has the same
// fields and converts to it.
type Details struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// RetryAfter, when positive, is sent as the Retry-After header in whole
	// seconds (rounded up, at least 1); it is not part of the JSON body.
	RetryAfter time.Duration `json:"-"`
}

// Write sends p as application/problem+json with Cache-Control: no-store.
func Write(w http.ResponseWriter, p Details) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(Seconds(p.RetryAfter), 10))
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

// Seconds rounds d up to whole seconds, at least 1: the value of a
// Retry-After header.
func Seconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}
