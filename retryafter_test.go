package idem

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// retryAfterNow is the frozen clock of the Retry-After tests: Thursday 2 January
// 2025, 03:04:05 UTC.
var retryAfterNow = time.Date(2025, time.January, 2, 3, 4, 5, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	if wd := retryAfterNow.Weekday(); wd != time.Thursday {
		t.Fatalf("frozen clock is a %v, the dates below assume a Thursday", wd)
	}
	tests := []struct {
		name   string
		value  string
		now    time.Time
		want   time.Duration
		wantOK bool
	}{
		// delta-seconds
		{"zero", "0", retryAfterNow, 0, true},
		{"seconds", "120", retryAfterNow, 120 * time.Second, true},
		{"leading zeros", "007", retryAfterNow, 7 * time.Second, true},
		{"all zeros", "0000", retryAfterNow, 0, true},
		{"surrounding spaces", "  7  ", retryAfterNow, 7 * time.Second, true},
		{"surrounding tabs", "\t7\t", retryAfterNow, 7 * time.Second, true},
		{"one day", "86400", retryAfterNow, 24 * time.Hour, true},
		{"just below saturation", "2147483647", retryAfterNow, (1<<31 - 1) * time.Second, true},
		{"at saturation", "2147483648", retryAfterNow, maxRetryAfter, true},
		{"above saturation", "2147483649", retryAfterNow, maxRetryAfter, true},
		{"int64 max", "9223372036854775807", retryAfterNow, maxRetryAfter, true},
		{"overflows uint64", "99999999999999999999999999999", retryAfterNow, maxRetryAfter, true},
		{"huge with leading zeros", "000000000000000000000000000012", retryAfterNow, 12 * time.Second, true},

		// HTTP-date, all three forms
		{"IMF-fixdate", "Thu, 02 Jan 2025 03:04:35 GMT", retryAfterNow, 30 * time.Second, true},
		{"RFC 850", "Thursday, 02-Jan-25 03:05:05 GMT", retryAfterNow, time.Minute, true},
		{"asctime", "Thu Jan  2 03:06:05 2025", retryAfterNow, 2 * time.Minute, true},
		{"date with OWS", " \tThu, 02 Jan 2025 03:04:35 GMT\t ", retryAfterNow, 30 * time.Second, true},
		{"date, now has fractions", "Thu, 02 Jan 2025 03:04:35 GMT", retryAfterNow.Add(500 * time.Millisecond), 29500 * time.Millisecond, true},
		{"date equal to now", "Thu, 02 Jan 2025 03:04:05 GMT", retryAfterNow, 0, true},
		{"date in the past", "Wed, 01 Jan 2025 00:00:00 GMT", retryAfterNow, 0, true},
		{"date long past", "Sun, 06 Nov 1994 08:49:37 GMT", retryAfterNow, 0, true},
		{"date next year", "Fri, 02 Jan 2026 03:04:05 GMT", retryAfterNow, 365 * 24 * time.Hour, true},
		{"date beyond saturation", "Fri, 31 Dec 9999 23:59:59 GMT", retryAfterNow, maxRetryAfter, true},
		{"date, now is the zero time", "Thu, 02 Jan 2025 03:04:35 GMT", time.Time{}, maxRetryAfter, true},

		// malformed
		{"empty", "", retryAfterNow, 0, false},
		{"spaces only", "   ", retryAfterNow, 0, false},
		{"tabs only", "\t\t", retryAfterNow, 0, false},
		{"plus sign", "+5", retryAfterNow, 0, false},
		{"negative", "-1", retryAfterNow, 0, false},
		{"negative zero", "-0", retryAfterNow, 0, false},
		{"fraction", "1.5", retryAfterNow, 0, false},
		{"exponent", "1e3", retryAfterNow, 0, false},
		{"hex", "0x10", retryAfterNow, 0, false},
		{"unit", "5s", retryAfterNow, 0, false},
		{"inner space", "1 2", retryAfterNow, 0, false},
		{"newline is not OWS", "\n5", retryAfterNow, 0, false},
		{"CR is not OWS", "5\r", retryAfterNow, 0, false},
		{"non-ASCII digit", "٣", retryAfterNow, 0, false},
		{"full-width digit", "５", retryAfterNow, 0, false},
		{"garbage", "soon", retryAfterNow, 0, false},
		{"two values", "5, 6", retryAfterNow, 0, false},
		{"date in another zone", "Thu, 02 Jan 2025 03:04:35 UTC", retryAfterNow, 0, false},
		{"date with offset", "Thu, 02 Jan 2025 03:04:35 +0000", retryAfterNow, 0, false},
		{"RFC 3339", "2025-01-02T03:04:35Z", retryAfterNow, 0, false},
		{"truncated date", "Thu, 02 Jan 2025", retryAfterNow, 0, false},
		{"date with trailing junk", "Thu, 02 Jan 2025 03:04:35 GMTx", retryAfterNow, 0, false},
		{"invalid day", "Thu, 32 Jan 2025 03:04:35 GMT", retryAfterNow, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := parseRetryAfter(tt.value, tt.now)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tt.value, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestMaxRetryAfterHeadroom pins that the saturated value leaves room for the
// Transport to add jitter and a start time without overflowing.
func TestMaxRetryAfterHeadroom(t *testing.T) {
	t.Parallel()
	if maxRetryAfter != time.Duration(1<<31)*time.Second {
		t.Fatalf("maxRetryAfter = %v", maxRetryAfter)
	}
	if maxRetryAfter > math.MaxInt64/4 {
		t.Errorf("maxRetryAfter = %v leaves less than 4x headroom below MaxInt64", maxRetryAfter)
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{
		"0", "120", "007", "  7  ", "+5", "-1", "1.5", "", " ", "2147483648",
		"99999999999999999999999999999", "Thu, 02 Jan 2025 03:04:35 GMT",
		"Thursday, 02-Jan-25 03:05:05 GMT", "Thu Jan  2 03:06:05 2025",
		"Sun, 06 Nov 1994 08:49:37 GMT", "Fri, 31 Dec 9999 23:59:59 GMT", "soon",
	} {
		f.Add(s, int64(0))
		f.Add(s, int64(1<<40))
	}
	f.Fuzz(func(t *testing.T, value string, offset int64) {
		now := retryAfterNow.Add(time.Duration(offset))
		got, ok := parseRetryAfter(value, now)
		if got < 0 {
			t.Fatalf("parseRetryAfter(%q) = %v: negative", value, got)
		}
		if got > maxRetryAfter {
			t.Fatalf("parseRetryAfter(%q) = %v: above the documented maximum %v", value, got, maxRetryAfter)
		}
		if !ok && got != 0 {
			t.Fatalf("parseRetryAfter(%q) = %v, false: a rejected value must give 0", value, got)
		}
		trimmed := strings.Trim(value, " \t")
		if trimmed == "" && ok {
			t.Fatalf("parseRetryAfter(%q) accepted a blank value", value)
		}
		if isASCIIDigits(trimmed) {
			if !ok {
				t.Fatalf("parseRetryAfter(%q) rejected delta-seconds", value)
			}
			want := maxRetryAfter
			n, err := strconv.ParseUint(trimmed, 10, 64)
			switch {
			case errors.Is(err, strconv.ErrRange):
			case err != nil:
				t.Fatalf("strconv.ParseUint(%q): %v", trimmed, err)
			case n < maxRetryAfterSeconds:
				want = time.Duration(n) * time.Second
			}
			if got != want {
				t.Fatalf("parseRetryAfter(%q) = %v, want %v", value, got, want)
			}
			return
		}
		// Anything else is accepted only as an HTTP-date, and then means that date.
		date, err := http.ParseTime(trimmed)
		if ok != (err == nil) {
			t.Fatalf("parseRetryAfter(%q) ok = %v, but http.ParseTime error = %v", value, ok, err)
		}
		if ok {
			want := min(max(date.Sub(now), 0), maxRetryAfter)
			if got != want {
				t.Fatalf("parseRetryAfter(%q) = %v, want %v", value, got, want)
			}
		}
	})
}

func isASCIIDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
