package server

import (
	"net/http"
	"time"

	"github.com/idemkit/idem/internal/httpfield"
)

// Headers of RFC 7240 that the middleware reads and writes.
const (
	// HeaderPrefer carries the client's preferences; the middleware honours
	// wait=N (seconds): how long a duplicate may wait for the first request.
	HeaderPrefer = "Prefer"
	// HeaderPreferenceApplied is sent as "wait=N" when the client's
	// Prefer: wait bounded the wait.
	HeaderPreferenceApplied = "Preference-Applied"
)

// maxPreferWait caps a parsed wait preference, so that the arithmetic on it
// never overflows; the middleware's own limit is always far below it.
const maxPreferWait = 24 * time.Hour

// preferWait returns the client's wait preference (RFC 7240 section 4.3):
// the value of the first "wait" preference of the Prefer header lines, in
// whole seconds, quoted or not (internal/httpfield reads it, for both halves
// of idem). A malformed wait is ignored, as RFC 7240 asks of preferences a
// server cannot use: ok is then false, as when there is none.
func preferWait(h http.Header) (d time.Duration, ok bool) {
	d, _, ok = httpfield.PreferWait(h.Values(HeaderPrefer), maxPreferWait)
	return d, ok
}

// trimSpaceTab trims RFC 9110 optional whitespace (spaces and tabs).
func trimSpaceTab(s string) string {
	return httpfield.TrimOWS(s)
}
