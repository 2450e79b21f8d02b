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
// first attempt: the Idempotency-Key already on the request (sent as it is), else
// the key in the context (WithKey), else, for POST and PATCH, a generated one
// (a random UUID version 4; see WithAutoKeys, WithKeyGenerator, UUIDv7). GET,
// HEAD, OPTIONS, TRACE, PUT and DELETE get a key only from the caller.
//
//   - An idempotent method, or any keyed request, is retried on network errors,
//     attempt time-outs, 408, 429, 500, 502, 503 and 504; a keyed one also on
//     409 (the server says the first attempt is still in progress).
//   - A POST or PATCH with no key is sent once (WithRetryUnsent allows a retry
//     when a dial error proves the connection never opened).
//   - Every other status (4xx, 501, 505, ...) ends the operation, and so do TLS
//     certificate errors, unsupported schemes, malformed requests and errors not
//     known to be network failures. Redirects are the http.Client's business:
//     each hop is its own operation, and "too many redirects" is never retried.
//   - A cancelled or expired context stops the operation at once.
//   - A body without GetBody is buffered up to WithBodyBufferLimit so that it
//     can be sent again; a larger one is sent once.
//
// Waits follow the backoff chosen by WithBackoff and WithJitter (full jitter by
// default). A Retry-After on 409, 429 or 503 is a floor, plus a random spread
// of up to 10% (at most 1s); one longer than WithMaxRetryAfter ends the
// operation with that response. No wait that would end past WithMaxElapsed or
// the context's deadline is started: the last response or error is returned
// instead.
//
// # What comes back
//
// When the operation ends on an HTTP response (a success, a status that may not
// be retried, or a retryable status once retries have run out), RoundTrip
// returns it, body unread, with a nil error. Bodies of discarded attempts are
// drained (up to 64 KiB) and closed so that connections are reused. When it
// ends on a transport error, or no attempt could be made, the error is an
// *Error that says how many attempts were made and why the Transport stopped;
// errors.Is matches its cause (ErrExhausted, ErrBudgetExhausted,
// ErrHostCoolingDown, ErrBodyNotReplayable, ErrInvalidKey, the context's error)
// and the last attempt's error. Replayed tells whether the server replayed a
// stored response.
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
