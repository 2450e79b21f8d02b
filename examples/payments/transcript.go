package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
)

// lineFormat lays out one transcript line: step, attempt, status, key,
// replayed, payments. Columns are separated by at least two spaces.
const lineFormat = "%-4s  %-7s  %-34s  %-8s  %-8s  %s\n"

// transcript writes the story; it keeps the first write error.
type transcript struct {
	w   io.Writer
	err error
}

func (t *transcript) printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, args...)
	}
}

// header starts a story's table.
func (t *transcript) header(title string) {
	t.printf("\n%s\n", title)
	t.printf(lineFormat, "step", "attempt", "status", "key", "replayed", "payments")
}

// line writes one event. attempt 0 prints as "-".
func (t *transcript) line(step string, attempt int, status, key, replayed string, payments int) {
	a := "-"
	if attempt > 0 {
		a = strconv.Itoa(attempt)
	}
	if key == "" {
		key = "-"
	}
	t.printf(lineFormat, step, a, status, key, replayed, strconv.Itoa(payments))
}

// shortKey returns the first 8 characters of a key, enough to tell keys apart.
func shortKey(key string) string {
	if len(key) > 8 {
		return key[:8]
	}
	return key
}

// statusText describes a response: its code and, for a problem+json answer,
// the problem's title (else the status text).
func statusText(resp *http.Response, body []byte) string {
	text := http.StatusText(resp.StatusCode)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		var p struct {
			Title string `json:"title"`
		}
		if json.Unmarshal(body, &p) == nil && p.Title != "" {
			text = p.Title
		}
	}
	return strconv.Itoa(resp.StatusCode) + " " + text
}

// replayedText is the replayed column of a response.
func replayedText(resp *http.Response) string {
	return strconv.FormatBool(idem.Replayed(resp))
}

// errorText describes a transport error in a few words.
func errorText(err error, timeout time.Duration) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timed out after " + timeout.String()
	}
	return "error: " + err.Error()
}

// retryText describes the failed attempt before the retry ev.
func retryText(ev idem.AttemptInfo, timeout time.Duration) string {
	switch {
	case ev.Reason == "attempt-timeout":
		return "timed out after " + timeout.String()
	case ev.Reason == "in-progress":
		return fmt.Sprintf("409 in progress, Retry-After %v", ev.RetryAfter)
	case ev.Err != nil:
		return errorText(ev.Err, timeout)
	}
	return strconv.Itoa(ev.Status) + " " + http.StatusText(ev.Status)
}
