// Package httpfield holds the small HTTP field parsers that both halves of
// idem read: delta-seconds (RFC 9110), which the client reads in Retry-After
// and the server in Prefer: wait, and the wait preference of RFC 7240, which
// the server honours and the client must not send twice. One copy, so that
// the halves cannot drift.
package httpfield

import (
	"strings"
	"time"
)

// DeltaSeconds parses s as RFC 9110 delta-seconds: one or more ASCII digits
// (leading zeros allowed), saturating at max rather than overflowing however
// many digits s has. It reports false if s is empty or holds anything else
// (signs, spaces, fractions).
func DeltaSeconds(s string, max int64) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < max { // once saturated, only check the remaining digits
			n = min(n*10+int64(c-'0'), max)
		}
	}
	return n, true
}

// PreferWait reads the first "wait" preference of the Prefer field lines
// (RFC 7240 section 4.3): found says whether there is one, valid or not; ok
// whether its value is delta-seconds (quoted or not), and d is then that many
// seconds, at most max. Preference names are case-insensitive; parameters
// after ';' are ignored; commas and semicolons inside quoted strings do not
// split. Only the first wait counts: a malformed first wait is not passed
// over for a later one.
func PreferWait(lines []string, max time.Duration) (d time.Duration, found, ok bool) {
	for _, line := range lines {
		for line != "" {
			var pref string
			pref, line = nextPreference(line)
			name, value, hasValue := strings.Cut(pref, "=")
			if !strings.EqualFold(TrimOWS(name), "wait") {
				continue
			}
			if !hasValue {
				return 0, true, false
			}
			v := TrimOWS(value)
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			secs, valid := DeltaSeconds(v, int64(max/time.Second))
			if !valid {
				return 0, true, false
			}
			return min(time.Duration(secs)*time.Second, max), true, true
		}
	}
	return 0, false, false
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

// TrimOWS trims RFC 9110 optional whitespace (spaces and tabs). A loop, not
// strings.Trim: it runs for every element of a field on the replay path, and
// Trim builds its set of characters on each call.
func TrimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
