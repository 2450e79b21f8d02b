package idem

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
)

// Reason says why an attempt is retried.
type Reason int

const (
	// ReasonTransportError: the attempt ended in a transport error that is not
	// known to be permanent (a reset or closed connection, an HTTP/2 stream
	// or connection error, a timeout of the next RoundTripper).
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

// name returns the reason as AttemptInfo.Reason names it.
func (r Reason) name() string {
	switch r {
	case ReasonTransportError:
		return reasonNetwork
	case ReasonAttemptTimeout:
		return reasonAttemptTimeout
	case ReasonStatus:
		return reasonStatus
	case ReasonInProgress:
		return reasonInProgress
	}
	return ""
}

// outcome is what one attempt came to, as classify sees it: a status, or a
// transport error (err), or a time-out of the attempt's own bound.
type outcome struct {
	status   int   // the response's status code; 0 when there was no response
	err      error // the next RoundTripper's error
	timedOut bool  // the attempt's bound (WithAttemptTimeout or the cap) cut it
	// fresh: the first attempt under a key generated for this operation. No
	// server can have that key in progress, so its 409 is a real conflict.
	fresh bool
}

// refusal says why an outcome is not retried.
type refusal uint8

const (
	refuseNone    refusal = iota // the outcome may be retried
	refuseFinal                  // a response whose status is final (2xx, 4xx, 501, ...)
	refuseError                  // an error known to be permanent
	refuseRequest                // a retryable outcome, but the request may not be repeated (unkeyed POST)
)

// classify is the retry rule of CONTRACT.md §1 as a pure function: given the
// request's method, whether the operation is keyed, whether WithRetryUnsent is
// on, and what an attempt came to, it returns why the attempt may be retried,
// or 0 and why not.
func classify(method string, keyed, retryUnsent bool, out outcome) (Reason, refusal) {
	repeatable := keyed || idempotentMethod(method)
	switch {
	case out.timedOut:
		if !repeatable {
			return 0, refuseRequest
		}
		return ReasonAttemptTimeout, refuseNone
	case out.err != nil:
		switch classifyError(out.err) {
		case errPermanent:
			return 0, refuseError
		case errUnprocessed:
			return ReasonTransportError, refuseNone
		case errUnsent:
			if repeatable || retryUnsent {
				return ReasonTransportError, refuseNone
			}
			return 0, refuseRequest
		}
		if !repeatable {
			return 0, refuseRequest
		}
		return ReasonTransportError, refuseNone
	}
	var r Reason
	switch out.status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		r = ReasonStatus
	case http.StatusConflict:
		if keyed && !out.fresh {
			r = ReasonInProgress
		}
	}
	switch {
	case r == 0:
		return 0, refuseFinal
	case !repeatable:
		return 0, refuseRequest
	}
	return r, refuseNone
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
	// errTransient: any error not known to be permanent; the request may or
	// may not have reached the server, so only a repeatable request is
	// retried.
	errTransient errClass = iota
	// errPermanent: retrying cannot help (see classifyError).
	errPermanent
	// errUnsent: the connection never opened (a dial error): the server cannot
	// have seen the request. An unkeyed POST is retried only with
	// WithRetryUnsent.
	errUnsent
	// errUnprocessed: the server says it did not process the request (HTTP/2
	// REFUSED_STREAM): any request may be retried.
	errUnprocessed
)

// h2StreamError has the fields of net/http's HTTP/2 stream error (and of
// golang.org/x/net/http2.StreamError): net/http's error converts itself into
// any struct with these fields through its As method, so errors.As finds the
// code without naming an unexported type or reading the error's text.
type h2StreamError struct {
	StreamID uint32
	Code     uint32
	Cause    error
}

func (e h2StreamError) Error() string { return "http2 stream error" }

// h2RefusedStream is HTTP/2's REFUSED_STREAM (RFC 9113 §7): the stream was
// refused before any processing.
const h2RefusedStream = 0x7

// classifyError says what err, returned by the next RoundTripper for one
// attempt, means for a retry. It decides by type, never by text. The errors
// known to be permanent are the same whatever is tried again: certificate
// and TLS errors, a host name that does not exist, a plain-HTTP answer to an
// HTTPS request. Any other error (resets, EOF, HTTP/2 stream and GOAWAY
// errors, errors of a wrapped RoundTripper it does not know) is transient:
// retried when the request is idempotent or keyed.
func classifyError(err error) errClass {
	var (
		unknownAuthority x509.UnknownAuthorityError
		certInvalid      x509.CertificateInvalidError
		hostname         x509.HostnameError
		verification     *tls.CertificateVerificationError
		recordHeader     tls.RecordHeaderError
		alert            tls.AlertError
		dnsErr           *net.DNSError
		opErr            *net.OpError
		streamErr        h2StreamError
	)
	switch {
	case errors.As(err, &unknownAuthority), errors.As(err, &certInvalid),
		errors.As(err, &hostname), errors.As(err, &verification),
		errors.As(err, &recordHeader), errors.As(err, &alert):
		return errPermanent // certificates and TLS: the same next time
	case errors.Is(err, http.ErrSchemeMismatch):
		return errPermanent // an HTTP server on an https URL
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return errPermanent // a name that does not exist
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return errUnsent
	case errors.As(err, &streamErr) && streamErr.Code == h2RefusedStream:
		return errUnprocessed
	}
	return errTransient
}
