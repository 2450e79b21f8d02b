package check

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	neturl "net/url"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// maxBody bounds what the check reads of a response body.
const maxBody = 4 << 20

// ErrBudget is the error of a request the check refused to send, or of an
// effect count it refused to take, because the run had already sent (or
// taken) the number it announced.
var ErrBudget = errors.New("check: request budget used up")

// An exchange is one request the check sent and what came back.
type exchange struct {
	method   string
	url      string
	reqHead  http.Header
	reqBody  []byte
	status   int
	header   http.Header
	body     []byte
	err      error
	start    time.Time
	end      time.Time
	replayed bool // the response carried the replay marker
}

func (e *exchange) ok() bool               { return e.err == nil }
func (e *exchange) is5xx() bool            { return e.err == nil && e.status >= 500 }
func (e *exchange) is2xx() bool            { return e.err == nil && e.status >= 200 && e.status < 300 }
func (e *exchange) is4xx() bool            { return e.err == nil && e.status >= 400 && e.status < 500 }
func (e *exchange) failed() bool           { return e.err != nil || e.status >= 500 }
func (e *exchange) elapsed() time.Duration { return e.end.Sub(e.start) }

// sameAnswer reports whether b is byte for byte the answer a was: status and
// body.
func sameAnswer(a, b *exchange) bool {
	return a.ok() && b.ok() && a.status == b.status && bytes.Equal(a.body, b.body)
}

// short is the status and, for problems, their title, for the report.
func (e *exchange) short() string {
	if e.err != nil {
		return "no answer: " + e.err.Error()
	}
	s := fmt.Sprintf("%d", e.status)
	if e.replayed {
		s += " (replay marker)"
	}
	if ct := e.header.Get("Content-Type"); strings.HasPrefix(ct, "application/problem+json") {
		s += " problem+json"
	}
	return s
}

// reqOpts says how to send one request of the operation.
type reqOpts struct {
	keys    []string      // one Idempotency-Key line each; nil: no key header
	op      string        // the operation's id, for the body's IDPlaceholder; "": a new one
	body    []byte        // nil: the configured body (a template, as it is)
	query   string        // added to the URL's query ("a=b"); "": none
	extra   []http.Header // added after the configured headers, replacing what they name
	base    string        // another URL to send to (the chaos proxy); "": the target
	client  *http.Client  // nil: the runner's
	written chan<- struct{}
}

// send sends one request and reads the whole answer.
func (r *runner) send(ctx context.Context, o reqOpts) *exchange {
	body := o.body
	if body == nil {
		body = r.cfg.Body
	}
	id := o.op
	if id == "" {
		id = operationID(r.cfg.NewKey())
	}
	body = render(body, id)
	url := withQuery(r.cfg.URL, o.query)
	if o.base != "" {
		url = o.base
	}
	ex := &exchange{method: r.cfg.Method, url: url, reqBody: body, start: r.cfg.Now()}
	if o.base != "" {
		ex.url = r.cfg.URL + " (through the chaos proxy)"
	}
	defer func() { ex.end = r.cfg.Now() }()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	if o.written != nil {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) {
				select {
				case o.written <- struct{}{}:
				default:
				}
			},
		})
	}
	req, err := http.NewRequestWithContext(ctx, r.cfg.Method, url, bytes.NewReader(body))
	if err != nil {
		ex.err = err
		return ex
	}
	for k, vs := range r.cfg.Header {
		req.Header[k] = append([]string(nil), vs...)
	}
	for _, h := range o.extra {
		for k, vs := range h {
			req.Header[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
		}
	}
	if o.keys != nil {
		req.Header[http.CanonicalHeaderKey(r.cfg.KeyHeader)] = append([]string(nil), o.keys...)
	}
	ex.reqHead = req.Header.Clone()
	client := o.client
	if client == nil {
		client = r.client
	}
	resp, err := client.Do(req)
	var uerr *neturl.Error
	if err != nil && o.base != "" && errors.As(err, &uerr) {
		err = fmt.Errorf("from the chaos proxy: %w", uerr.Err) // its loopback address says nothing
	}
	if err != nil {
		ex.err = err
		return ex
	}
	defer resp.Body.Close()
	ex.status = resp.StatusCode
	ex.header = resp.Header
	ex.body, ex.err = io.ReadAll(io.LimitReader(resp.Body, maxBody))
	ex.replayed = isMarker(resp.Header.Get(r.cfg.ReplayHeader))
	return ex
}

// withQuery returns u with q added to its query (u was parsed by
// Config.withDefaults).
func withQuery(u, q string) string {
	if q == "" {
		return u
	}
	p, err := neturl.Parse(u)
	if err != nil {
		return u
	}
	if p.RawQuery != "" {
		q = p.RawQuery + "&" + q
	}
	p.RawQuery = q
	return p.String()
}

// isMarker reads a replay marker's value: true, 1 or the Structured Field
// boolean ?1.
func isMarker(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "1", "?1":
		return true
	}
	return false
}

// countingTransport sends at most limit requests through next.
type countingTransport struct {
	next  http.RoundTripper
	limit int64
	sent  atomic.Int64
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := req.Context().Err(); err != nil { // never sent: not counted
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	if t.sent.Add(1) > t.limit {
		t.sent.Add(-1)
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("%w (%d requests)", ErrBudget, t.limit)
	}
	return t.next.RoundTrip(req)
}

// redacted are the request headers whose values the evidence hides.
var redacted = map[string]bool{"Authorization": true, "Cookie": true, "Proxy-Authorization": true, "X-Api-Key": true}

// evidence renders the exchange for a person: the request and the answer.
func (e *exchange) evidence() Exchange {
	var req strings.Builder
	fmt.Fprintf(&req, "%s %s\n", e.method, e.url)
	writeHeaders(&req, e.reqHead, func(k, v string) string {
		if redacted[k] {
			return "<redacted>"
		}
		return v
	})
	if len(e.reqBody) > 0 {
		fmt.Fprintf(&req, "\n%s", truncate(e.reqBody, 300))
	}
	var resp strings.Builder
	if e.err != nil {
		fmt.Fprintf(&resp, "no answer: %v", e.err)
	} else {
		fmt.Fprintf(&resp, "%d %s\n", e.status, http.StatusText(e.status))
		shown := http.Header{}
		for k, vs := range e.header {
			switch k {
			case "Date", "Content-Length", "Connection", "Keep-Alive":
				continue
			}
			shown[k] = vs
		}
		writeHeaders(&resp, shown, func(_, v string) string { return truncate([]byte(v), 120) })
		if len(e.body) > 0 {
			fmt.Fprintf(&resp, "\n%s", truncate(e.body, 300))
		}
	}
	return Exchange{Request: strings.TrimRight(req.String(), "\n"), Response: strings.TrimRight(resp.String(), "\n")}
}

func writeHeaders(b *strings.Builder, h http.Header, show func(k, v string) string) {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range h[k] {
			fmt.Fprintf(b, "%s: %s\n", k, show(k, v))
		}
	}
}
