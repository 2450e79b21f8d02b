package idem

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"

	"github.com/jarcoal/httpmock"
)

const mockURL = "http://api.example/v1/things"

// retryMethod is a way of sending a request, for the retry table.
type retryMethod struct {
	name   string
	method string
	keyed  bool     // the request ends up with an Idempotency-Key
	opts   []Option // extra options
	ctxKey bool     // give the key through the context
}

var retryMethods = []retryMethod{
	{name: "GET", method: http.MethodGet},
	{name: "HEAD", method: http.MethodHead},
	{name: "OPTIONS", method: http.MethodOptions},
	{name: "TRACE", method: http.MethodTrace},
	{name: "PUT", method: http.MethodPut},
	{name: "DELETE", method: http.MethodDelete},
	{name: "PUT/keyed", method: http.MethodPut, keyed: true, ctxKey: true},
	{name: "POST/auto-key", method: http.MethodPost, keyed: true},
	{name: "PATCH/auto-key", method: http.MethodPatch, keyed: true},
	{name: "POST/context-key", method: http.MethodPost, keyed: true, ctxKey: true, opts: []Option{WithAutoKeys(false)}},
	{name: "POST/no-key", method: http.MethodPost, opts: []Option{WithAutoKeys(false)}},
	{name: "PATCH/no-key", method: http.MethodPatch, opts: []Option{WithAutoKeys(false)}},
	{name: "PURGE/no-key", method: "PURGE"},
	{name: "PURGE/keyed", method: "PURGE", keyed: true, ctxKey: true},
}

// TestRetryTableStatus checks CONTRACT.md §1 status by status and method by method.
func TestRetryTableStatus(t *testing.T) {
	t.Parallel()
	// The statuses that may be retried for an idempotent or keyed request; 409
	// only for a keyed one. Everything else goes back to the caller as it is.
	retryable := map[int]bool{408: true, 429: true, 500: true, 502: true, 503: true, 504: true}
	// RFC 9110's idempotent methods, written out: the expected values never
	// come from the code under test.
	idempotent := map[string]bool{"GET": true, "HEAD": true, "OPTIONS": true, "TRACE": true, "PUT": true, "DELETE": true}
	statuses := []int{200, 201, 204, 301, 304, 400, 401, 403, 404, 405, 408, 409, 410, 412, 413, 415, 422, 425, 429,
		451, 500, 501, 502, 503, 504, 505, 507, 511, 520}
	const maxAttempts = 3
	for _, m := range retryMethods {
		for _, status := range statuses {
			want := 1
			if (retryable[status] || status == 409 && m.keyed) && (idempotent[m.method] || m.keyed) {
				want = maxAttempts
			}
			switch {
			case status == 409 && m.keyed && !m.ctxKey:
				want = 1 // the first attempt under a generated key: no server can have it in progress
			case status == 409 && m.keyed:
				want = 1 + 20 // 409 polls do not use up attempts: the first, then at most 20 polls after a 409
			}
			t.Run(fmt.Sprintf("%s/%d", m.name, status), func(t *testing.T) {
				t.Parallel()
				// A bubble: the polls after a bare 409 wait up to 1s each.
				synctest.Test(t, func(t *testing.T) { retryTableCase(t, m, status, want) })
			})
		}
	}
}

// retryTableCase sends one request of the table and checks its attempts.
func retryTableCase(t *testing.T, m retryMethod, status, want int) {
	const maxAttempts = 3
	mock := httpmock.NewMockTransport()
	var keys []string
	mock.RegisterResponder(m.method, mockURL, func(req *http.Request) (*http.Response, error) {
		keys = append(keys, req.Header.Get(headerKeyName))
		return httpmock.NewStringResponse(status, "x"), nil
	})
	opts := append([]Option{WithMaxAttempts(maxAttempts), noWait()}, m.opts...)
	tr := NewTransport(mock, opts...)
	ctx := context.Background()
	if m.ctxKey {
		ctx = ContextWithKey(ctx, "key-from-context")
	}
	resp, err := tr.RoundTrip(mustRequest(t, ctx, m.method, mockURL, "payload"))
	if err != nil {
		t.Fatalf("RoundTrip: %v", err)
	}
	if resp.StatusCode != status {
		t.Errorf("status %d, want %d", resp.StatusCode, status)
	}
	_ = resp.Body.Close()
	if got := mock.GetTotalCallCount(); got != want {
		t.Errorf("%d attempts, want %d", got, want)
	}
	for _, k := range keys {
		if (k != "") != m.keyed || k != keys[0] {
			t.Errorf("keys sent %q: want one key on every attempt=%v", keys, m.keyed)
			break
		}
	}
}

// TestRetryTableErrors checks which transport errors are retried, for each kind
// of request.
func TestRetryTableErrors(t *testing.T) {
	t.Parallel()
	dnsNotFound := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	errs := []struct {
		name string
		err  error
		// class: "transient" is retried for idempotent or keyed requests,
		// "permanent" never. An unkeyed POST is never retried, whatever the
		// error (a dial error or HTTP/2 REFUSED_STREAM included: the
		// contract's "one attempt only").
		class string
	}{
		{"connection refused", refused, "transient"},
		{"connection reset", reset, "transient"},
		{"EOF", io.EOF, "transient"},
		{"unexpected EOF", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), "transient"},
		{"timeout", timeoutErr{}, "transient"},
		{"broken pipe", syscall.EPIPE, "transient"},
		{"dns temporary", &net.OpError{Op: "dial", Err: &net.DNSError{Err: "server misbehaving", IsTemporary: true}}, "transient"},
		{"dns not found", dnsNotFound, "permanent"},
		{"unknown authority", x509.UnknownAuthorityError{}, "permanent"},
		{"certificate invalid", x509.CertificateInvalidError{Reason: x509.Expired}, "permanent"},
		{"hostname", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "x"}, "permanent"},
		{"tls verification", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, "permanent"},
		{"tls record header", tls.RecordHeaderError{Msg: "not TLS"}, "permanent"},
		{"tls alert", tls.AlertError(42), "permanent"},
		{"scheme mismatch", http.ErrSchemeMismatch, "permanent"},
		// An error not known to be permanent may be repeated (issue 9).
		{"unknown error", errors.New("signing failed"), "transient"},
		{"http2 internal error", h2StreamError{StreamID: 1, Code: 0x2}, "transient"},
		{"http2 refused stream", h2StreamError{StreamID: 1, Code: 0x7}, "transient"},
	}
	reqs := []struct {
		name   string
		method string
		opts   []Option
		ctxKey bool
		// retried lists the classes retried for this request.
		retried map[string]bool
	}{
		{"GET", http.MethodGet, nil, false, map[string]bool{"transient": true}},
		{"POST/auto-key", http.MethodPost, nil, false, map[string]bool{"transient": true}},
		{"POST/context-key", http.MethodPost, []Option{WithAutoKeys(false)}, true, map[string]bool{"transient": true}},
		{"POST/no-key", http.MethodPost, []Option{WithAutoKeys(false)}, false, map[string]bool{}},
		{"PATCH/no-key", http.MethodPatch, []Option{WithAutoKeys(false)}, false, map[string]bool{}},
	}
	const maxAttempts = 3
	for _, r := range reqs {
		for _, e := range errs {
			t.Run(r.name+"/"+e.name, func(t *testing.T) {
				t.Parallel()
				mock := httpmock.NewMockTransport()
				mock.RegisterResponder(r.method, mockURL, httpmock.NewErrorResponder(e.err))
				opts := append([]Option{WithMaxAttempts(maxAttempts), noWait()}, r.opts...)
				tr := NewTransport(mock, opts...)
				ctx := context.Background()
				if r.ctxKey {
					ctx = ContextWithKey(ctx, "k1")
				}
				resp, err := tr.RoundTrip(mustRequest(t, ctx, r.method, mockURL, "payload"))
				if resp != nil {
					t.Fatalf("got a response (%d), want an error", resp.StatusCode)
				}
				want := 1
				if r.retried[e.class] {
					want = maxAttempts
				}
				if got := mock.GetTotalCallCount(); got != want {
					t.Errorf("%d attempts, want %d", got, want)
				}
				te := asError(t, err)
				if te.Attempts != want {
					t.Errorf("Error.Attempts = %d, want %d", te.Attempts, want)
				}
				if !errors.Is(err, e.err) {
					t.Errorf("errors.Is(err, %v) is false; err = %v", e.err, err)
				}
				if want == maxAttempts && !errors.Is(err, ErrExhausted) {
					t.Errorf("retried to the end but Cause = %v, want ErrExhausted", te.Cause)
				}
				if want == 1 && te.Cause != nil {
					t.Errorf("not retried but Cause = %v, want nil", te.Cause)
				}
				// The message says whether the error or the request was not retryable.
				if want == 1 {
					wantText := "request not retryable"
					if e.class == "permanent" {
						wantText = "error not retryable"
					}
					if !strings.Contains(err.Error(), wantText) {
						t.Errorf("err %q does not say %q", err, wantText)
					}
				}
			})
		}
	}
}

// TestClassify runs the rule as the pure function it is: no transport, the
// expected answers written out.
func TestClassify(t *testing.T) {
	t.Parallel()
	reset := &net.OpError{Op: "read", Err: syscall.ECONNRESET}
	dial := &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}
	cert := x509.UnknownAuthorityError{}
	tests := []struct {
		method  string
		keyed   bool
		fresh   bool
		out     outcome
		reason  string
		refusal refusal
	}{
		{"GET", false, false, outcome{status: 503}, "status", refuseNone},
		{"DELETE", false, false, outcome{status: 429}, "status", refuseNone},
		{"OPTIONS", false, false, outcome{status: 408}, "status", refuseNone},
		{"TRACE", false, false, outcome{err: reset}, "network", refuseNone},
		{"HEAD", false, false, outcome{timedOut: true}, "attempt-timeout", refuseNone},
		{"PUT", false, false, outcome{status: 409}, "", refuseFinal},
		{"PUT", true, false, outcome{status: 409}, "in-progress", refuseNone},
		{"POST", true, true, outcome{status: 409}, "", refuseFinal},
		{"POST", true, true, outcome{status: 503}, "status", refuseNone},
		{"POST", true, false, outcome{status: 502}, "status", refuseNone},
		{"POST", false, false, outcome{status: 502}, "", refuseRequest},
		{"POST", false, false, outcome{status: 201}, "", refuseFinal},
		{"POST", false, false, outcome{err: reset}, "", refuseRequest},
		{"POST", false, false, outcome{err: dial}, "", refuseRequest},
		{"POST", false, false, outcome{err: h2StreamError{Code: 0x7}}, "", refuseRequest},
		{"PATCH", true, false, outcome{err: errors.New("unknown")}, "network", refuseNone},
		{"GET", false, false, outcome{err: cert}, "", refuseError},
		{"GET", false, false, outcome{status: 501}, "", refuseFinal},
		{"GET", false, false, outcome{status: 505}, "", refuseFinal},
		{"GET", false, false, outcome{status: 404}, "", refuseFinal},
		{"", false, false, outcome{status: 500}, "status", refuseNone},
		// A WithRetryIf predicate adds and refuses; never for an unkeyed POST.
		{"GET", false, false, outcome{status: 425, custom: 1}, "custom", refuseNone},
		{"GET", false, false, outcome{err: cert, custom: 1}, "custom", refuseNone},
		{"POST", true, false, outcome{status: 520, custom: 1}, "custom", refuseNone},
		{"POST", false, false, outcome{status: 520, custom: 1}, "", refuseRequest},
		{"POST", false, false, outcome{err: reset, custom: 1}, "", refuseRequest},
		{"GET", false, false, outcome{status: 503, custom: -1}, "", refuseFinal},
		{"GET", false, false, outcome{err: reset, custom: -1}, "", refuseError},
		{"POST", true, false, outcome{status: 409, custom: -1}, "", refuseFinal},
	}
	for _, tt := range tests {
		reason, why := classify(tt.method, tt.keyed, tt.fresh, tt.out)
		if reason != tt.reason || why != tt.refusal {
			t.Errorf("classify(%q, keyed=%v, fresh=%v, %+v) = %q, %d; want %q, %d",
				tt.method, tt.keyed, tt.fresh, tt.out, reason, why, tt.reason, tt.refusal)
		}
	}
}

// TestRetryIfOverRealServer: a predicate adds 425 to the retried answers and
// refuses the retry of a 503; an unkeyed POST still goes once whatever it
// says.
func TestRetryIfOverRealServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		first     int
		autoKeys  bool
		method    string
		wantCalls int32
		wantCode  int
	}{
		{"425 added, keyed POST", http.StatusTooEarly, true, http.MethodPost, 2, 201},
		{"425 added, GET", http.StatusTooEarly, true, http.MethodGet, 2, 201},
		{"425 added, unkeyed POST goes once", http.StatusTooEarly, false, http.MethodPost, 1, 425},
		{"503 refused", http.StatusServiceUnavailable, true, http.MethodGet, 1, 503},
		{"502 as the table says", http.StatusBadGateway, true, http.MethodGet, 2, 201},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) == 1 {
					w.WriteHeader(tc.first)
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			defer srv.Close()
			client := NewClient(noWait(), WithAutoKeys(tc.autoKeys),
				WithRetryIf(func(resp *http.Response, err error, retryable bool) bool {
					if resp != nil && resp.StatusCode == http.StatusTooEarly {
						return true
					}
					if resp != nil && resp.StatusCode == http.StatusServiceUnavailable {
						return false
					}
					return retryable
				}))
			req, _ := http.NewRequest(tc.method, srv.URL, nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tc.wantCode || n.Load() != tc.wantCalls {
				t.Errorf("status %d after %d requests, want %d after %d", resp.StatusCode, n.Load(), tc.wantCode, tc.wantCalls)
			}
		})
	}
}
