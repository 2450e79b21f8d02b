package idem

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/idemkit/idem/internal/retry"
)

// outcome is what one attempt came to, as classify sees it: a status, or a
// transport error (err), or a time-out of the attempt's own bound.
type outcome struct {
	status   int   // the response's status code; 0 when there was no response
	err      error // the next RoundTripper's error
	timedOut bool  // the attempt's bound (WithAttemptTimeout or the cap) cut it
	// retryAfter is the Retry-After of a 409, 429 or 503, when it has a valid
	// one (hasRetryAfter).
	retryAfter    time.Duration
	hasRetryAfter bool
	// custom is the WithRetryIf predicate's word: +1 retry, -1 do not, 0 as
	// the table says.
	custom int8
}

// refusal says why an outcome is not retried (the engine's Refusal).
type refusal = retry.Refusal

const (
	refuseNone    = retry.RefuseNone    // the outcome may be retried
	refuseFinal   = retry.RefuseFinal   // a response whose status is final (2xx, 4xx, 501, ...)
	refuseError   = retry.RefuseError   // an error known to be permanent
	refuseRequest = retry.RefuseRequest // a retryable outcome, but the request may not be repeated (unkeyed POST)
)

// engine returns out in the engine's words: the class of its status (or
// whether its error is permanent), and whether its Retry-After holds the
// host back.
func (out outcome) engine() retry.Outcome {
	e := retry.Outcome{Code: out.status, Err: out.err, TimedOut: out.timedOut,
		RetryAfter: out.retryAfter, HasRetryAfter: out.hasRetryAfter, Custom: out.custom}
	switch out.status {
	case 0:
		e.Permanent = out.err != nil && !out.timedOut && classifyError(out.err) == errPermanent
	case http.StatusRequestTimeout, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		e.Class, e.Holds = retry.Failing, holdsHost(out.status)
	case http.StatusConflict:
		e.Class = retry.InProgress
	default:
		e.Class = retry.Final
	}
	return e
}

// classify is the retry table of CONTRACT.md §1 for an HTTP request: given
// the request's method, whether the operation is keyed, whether the attempt
// was the first under a key generated for it (fresh), and what the attempt
// came to, it returns why the attempt may be retried (an AttemptInfo.Reason),
// or "" and why not (see retry.Classify, which holds the rules).
func classify(method string, keyed, fresh bool, out outcome) (string, refusal) {
	return retry.Classify(idempotentMethod(method), keyed, fresh, out.engine())
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
)

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
	}
	return errTransient
}
