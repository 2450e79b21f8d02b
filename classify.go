package idem

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
)

// Reason says why an attempt is retried.
type Reason int

const (
	// ReasonTransportError: the attempt ended in a network error (connection
	// refused or reset, closed before the response, a timeout of the next
	// RoundTripper).
	ReasonTransportError Reason = iota + 1
	// ReasonAttemptTimeout: the attempt's response headers did not arrive within
	// WithAttemptTimeout (or before WithMaxElapsed).
	ReasonAttemptTimeout
	// ReasonStatus: the server answered 408, 429, 500, 502, 503 or 504.
	ReasonStatus
	// ReasonInProgress: the server answered 409 to a keyed request: the first
	// attempt with that key is still running.
	ReasonInProgress
)

// String returns the reason's name.
func (r Reason) String() string {
	switch r {
	case ReasonTransportError:
		return "transport error"
	case ReasonAttemptTimeout:
		return "attempt timeout"
	case ReasonStatus:
		return "retryable status"
	case ReasonInProgress:
		return "in progress"
	}
	return "unknown"
}

// idempotentMethod reports whether RFC 9110 makes method idempotent ("" is GET).
func idempotentMethod(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// autoKeyMethod reports whether a key is generated for method when none is given.
func autoKeyMethod(method string) bool {
	return method == http.MethodPost || method == http.MethodPatch
}

// statusReason returns why a response with status code may be retried, or 0 if
// it may not. keyed says whether the operation has an Idempotency-Key; only
// then does 409 mean "still in progress". The caller has already checked that
// the request may be repeated at all (idempotent method or keyed).
func statusReason(code int, keyed bool) Reason {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return ReasonStatus
	case http.StatusConflict:
		if keyed {
			return ReasonInProgress
		}
	}
	return 0
}

// honoursRetryAfter reports whether a Retry-After on a response with status code
// sets the wait before the retry.
func honoursRetryAfter(code int) bool {
	return code == http.StatusConflict || code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable
}

// holdsHost reports whether a Retry-After on a response with status code holds
// every operation on the host back (through the retry budget).
func holdsHost(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable
}

// errClass is what a transport error says about retrying.
type errClass uint8

const (
	// errPermanent: retrying cannot help (certificate errors, an unsupported
	// scheme, a malformed request) or the error is not known to be transient.
	errPermanent errClass = iota
	// errTransient: a network failure; the request may or may not have reached
	// the server.
	errTransient
	// errUnsent: the connection never opened (a dial error): the server cannot
	// have seen the request.
	errUnsent
)

// classifyError says whether err, returned by the next RoundTripper for one
// attempt, may be retried. It decides by type, never by text. It is
// conservative: an error that is not known to be a network failure is
// permanent, so an error of a wrapped RoundTripper (a signing failure, a bad
// URL, an unsupported scheme) is never repeated.
func classifyError(err error) errClass {
	// Certificate and TLS configuration errors: the same next time.
	var (
		unknownAuthority x509.UnknownAuthorityError
		certInvalid      x509.CertificateInvalidError
		hostname         x509.HostnameError
		verification     *tls.CertificateVerificationError
		recordHeader     tls.RecordHeaderError
		alert            tls.AlertError
	)
	if errors.As(err, &unknownAuthority) || errors.As(err, &certInvalid) ||
		errors.As(err, &hostname) || errors.As(err, &verification) ||
		errors.As(err, &recordHeader) || errors.As(err, &alert) {
		return errPermanent
	}
	// A name that does not exist.
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return errPermanent
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		if opErr.Op == "dial" {
			return errUnsent
		}
		return errTransient
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return errTransient
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) {
		return errTransient
	}
	return errPermanent
}
