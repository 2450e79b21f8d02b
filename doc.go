// Package idem makes HTTP retries safe. Its Transport, an http.RoundTripper,
// gives every POST and PATCH an Idempotency-Key, sends the same key on every
// attempt of one operation, and retries only what may be repeated; a server
// that honours the key (such as idem/server) then changes its state at most
// once per operation, whatever the faults.
//
//	client := idem.NewClient(
//		idem.WithMaxAttempts(4),
//		idem.WithRetryBudget(idem.NewBudget()),
//	)
//	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
//	resp, err := client.Do(req) // retried with one key; KeyFromRequest(resp.Request) tells it
//
// or wrap an existing transport: idem.NewTransport(myTransport, opts...).
//
// # What is retried
//
// One call of RoundTrip is one logical operation. Its key is chosen before the
// first attempt: the Idempotency-Key already on the request (sent as it is,
// under any spelling of the header name, never twice), else the key in the
// context (WithKey), else, for POST and PATCH, a generated one (a random UUID
// version 4; see WithAutoKeys, WithKeyGenerator). GET, HEAD, OPTIONS,
// TRACE, PUT and DELETE get a key only from the caller. Keys follow the one
// grammar the idem server reads: 1 to 255 visible ASCII characters, raw or as
// a Structured Field string (WithQuotedKeys).
//
//   - An idempotent method, or any keyed request, is retried on transport
//     errors over HTTP/1.1 and HTTP/2 (resets, EOF, GOAWAY, RST_STREAM, and any
//     error not known to be permanent), attempt time-outs, 408, 429, 500, 502,
//     503 and 504; a keyed one also on 409 (the server says the first attempt
//     is still in progress).
//   - A POST or PATCH with no key is sent once, except after HTTP/2
//     REFUSED_STREAM (the server processed nothing); WithRetryUnsent also
//     allows a retry when a dial error proves the connection never opened.
//   - The errors known to be permanent end the operation: TLS certificate and
//     handshake errors, a host name that does not exist, an HTTP answer to an
//     HTTPS request. So does every other status (4xx, 501, 505, ...). The
//     *Error says whether the error or the request was not retryable.
//     Redirects are the http.Client's business: each hop is its own operation.
//   - A request that is not a well-formed http or https request (a nil URL or
//     Header, no host, another scheme, an invalid method or header field) is
//     passed to the next RoundTripper once,
//     as it is, so that the caller gets its error (net/http's), never a panic.
//   - A cancelled or expired context stops the operation at once.
//   - A body with GetBody is rewound with it. A body without GetBody whose
//     length is known and at most WithBodyBufferLimit is buffered (for as long
//     as the caller's context allows) and replayed; a ContentLength that does
//     not match the body fails as net/http fails. Any other body is a stream
//     (unknown length: chunked, with trailers, or a full-duplex HTTP/2
//     exchange) and goes out once, as the caller built it, never retried. A
//     caller makes any body without GetBody a stream with ContentLength -1.
//
// Waits follow the backoff chosen by WithBackoff and WithJitter (full jitter by
// default). A Retry-After on 409, 429 or 503 is a floor, plus a random spread
// of up to 10% (at most 1s). No wait that would end past WithMaxElapsed or the
// context's deadline is started, and a 429 or 503 asking for one (or for more
// than WithMaxRetryAfter) ends the operation with that response. A keyed 409
// is different: the answer exists or soon will, so when its Retry-After ends
// past the deadline (or exceeds WithMaxRetryAfter, which then stands for the
// deadline) and one attempt still fits, the Transport waits what
// remains less one attempt's worth (WithAttemptTimeout, or half of what
// remains) and makes that last attempt. A 409 is a poll, not a failure: it
// does not use up an attempt of WithMaxAttempts (at most 10 retries after a
// 409 per operation, and the cap bounds them). Every keyed attempt sends RFC
// 7240 Prefer: wait=N (but the first under a key generated for the
// operation, which no server can have in progress), N the whole seconds it
// can wait for its answer less a tenth (at least 100ms), 0 under a second,
// so that a server that makes duplicates
// wait answers 409 before the attempt is cut; a caller's own Prefer wait is
// kept. The attempt after a 409 is a poll of a server known to be working on
// the answer: it may wait at least 5s (Prefer: wait=4) even when
// WithAttemptTimeout is shorter, the cap still bounding it, so the server
// holds it until the answer exists and the replay comes the moment it does.
//
// A keyed attempt that passes WithAttemptTimeout is not cut: the operation
// moves on (it backs off, retries, polls) while that attempt goes on, and if
// its answer comes first and may not be retried (a 2xx, a 4xx), it is the
// operation's answer, the moment it arrives. With a key, the first attempt to
// reach the server is the one doing the work there, and later attempts are
// duplicates the server can only make wait or answer 409: the first's own
// response is the outcome. Late attempts are cancelled when the operation
// ends, so each lives at most as long as the operation; a late answer that may
// be retried (5xx, 409, 429) or an error is let go. Attempts without a key
// are cut at their time-out.
//
// # What comes back
//
// When the operation ends on an HTTP response (a success, a status that may not
// be retried, or a retryable status once retries have run out), RoundTrip
// returns it, body unread, with a nil error. Bodies of discarded attempts are
// drained (up to 64 KiB, and for at most half the time that would be left) and
// closed so that connections are reused. When it
// ends on a transport error, or no attempt could be made, the error is an
// *Error that says how many attempts were made and why the Transport stopped;
// errors.Is matches its cause (ErrExhausted, ErrBudgetExhausted,
// ErrHostCoolingDown, ErrBodyNotReplayable, ErrInvalidKey, the context's error)
// and the last attempt's error. When the WithMaxElapsed cap, not the caller's
// context, ended the operation, the cause is ErrExhausted and the message
// names the cap; the error does not match context.DeadlineExceeded. Replayed
// tells whether the server replayed a stored response.
//
// # Options and the zero Transport
//
// Options (Option, BudgetOption) are checked when they are made: an
// impossible value panics there, with a message that names the option, never
// later on a request. A zero Transport is ready to use, with the defaults of
// NewTransport(nil) over http.DefaultTransport; a zero Budget has the
// defaults of NewBudget().
//
// # Only one layer should retry
//
// Retries multiply: a caller that retries around this Transport, or a
// dependency that retries on its own behind it, turns one failure into
// attempts × attempts requests. Let one layer retry (this one) and make the
// others fail fast. A Budget shared by the Transports that call one dependency
// bounds what remains: retries are allowed only while it has tokens (about 10%
// of the traffic by default), and a 429 or 503 with Retry-After holds every
// operation to that host back until the time it names (at most
// WithMaxRetryAfter). An operation held past its deadline fails with
// ErrHostCoolingDown without sending anything.
package idem
