package idem

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"time"
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

// refusal says why an outcome is not retried.
type refusal uint8

const (
	refuseNone    refusal = iota // the outcome may be retried
	refuseFinal                  // a response whose status is final (2xx, 4xx, 501, ...)
	refuseError                  // an error known to be permanent
	refuseRequest                // a retryable outcome, but the request may not be repeated (unkeyed POST)
)

// classify is the retry table of CONTRACT.md §1 as a pure function: given
// the request's method, whether the operation is keyed, whether the attempt
// was the first under a key generated for it (fresh), and what the attempt
// came to, it returns why the attempt may be retried (an AttemptInfo.Reason),
// or "" and why not. The verdict of a WithRetryIf predicate (out.custom) can
// add a retryable outcome or refuse one; it never makes a request that may
// not be repeated (a POST or PATCH without a key) repeat.
func classify(method string, keyed, fresh bool, out outcome) (string, refusal) {
	repeatable := keyed || idempotentMethod(method)
	reason, why := tableReason(keyed, fresh, out)
	switch {
	case out.custom < 0:
		if reason != "" {
			reason, why = "", refuseFinal
			if out.status == 0 {
				why = refuseError
			}
		}
	case out.custom > 0 && reason == "":
		reason, why = reasonCustom, refuseNone
	}
	switch {
	case reason == "":
		return "", why
	case !repeatable:
		return "", refuseRequest
	}
	return reason, refuseNone
}

// tableReason is the table alone: why the outcome may be retried when the
// request may be repeated, or "" and why not.
func tableReason(keyed, fresh bool, out outcome) (string, refusal) {
	switch {
	case out.timedOut:
		return reasonAttemptTimeout, refuseNone
	case out.err != nil:
		if classifyError(out.err) == errPermanent {
			return "", refuseError
		}
		return reasonNetwork, refuseNone
	}
	switch out.status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return reasonStatus, refuseNone
	case http.StatusConflict:
		if keyed && !fresh {
			return reasonInProgress, refuseNone
		}
	}
	return "", refuseFinal
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
