package server

import (
	"net/http"
	"strings"
	"time"
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
// whole seconds, quoted or not. Preference names are case-insensitive;
// parameters after ';' are ignored. A malformed wait is ignored, as RFC 7240
// asks of preferences a server cannot use: ok is then false, as when there is
// none.
func preferWait(h http.Header) (d time.Duration, ok bool) {
	for _, line := range h.Values(HeaderPrefer) {
		for line != "" {
			var pref string
			pref, line = nextPreference(line)
			name, value, hasValue := strings.Cut(pref, "=")
			if !strings.EqualFold(trimSpaceTab(name), "wait") {
				continue
			}
			// Only the first wait counts, valid or not.
			if !hasValue {
				return 0, false
			}
			return parseWaitSeconds(trimSpaceTab(value))
		}
	}
	return 0, false
}

// nextPreference splits off the first preference of a Prefer line: up to the
// first comma outside a quoted string, without its parameters (from the first
// ';' outside a quoted string). It returns the preference and the rest.
func nextPreference(s string) (pref, rest string) {
	quoted, escaped, params := false, false, -1
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case !quoted && c == ';' && params < 0:
			params = i
		case !quoted && c == ',':
			if params < 0 {
				params = i
			}
			return s[:params], s[i+1:]
		}
	}
	if params < 0 {
		params = len(s)
	}
	return s[:params], ""
}

// parseWaitSeconds reads delta-seconds (RFC 9110 1*DIGIT), optionally as a
// quoted string. Values past maxPreferWait are capped.
func parseWaitSeconds(v string) (time.Duration, bool) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	if v == "" {
		return 0, false
	}
	var secs int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if secs < int64(maxPreferWait/time.Second) {
			secs = secs*10 + int64(c-'0')
		}
	}
	return min(time.Duration(secs)*time.Second, maxPreferWait), true
}

// trimSpaceTab trims RFC 9110 optional whitespace (spaces and tabs).
func trimSpaceTab(s string) string {
	return strings.Trim(s, " \t")
}
