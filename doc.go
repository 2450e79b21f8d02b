// Package idem makes HTTP retries safe. Its Transport, an http.RoundTripper,
// gives every POST and PATCH an Idempotency-Key, sends the same key on every
// attempt of one operation, and retries only what may be repeated; a server
// that honours the key (such as idem/server) then changes its state at most
// once per operation, whatever the faults.
//
//	client := idem.NewClient() // or &http.Client{Transport: idem.NewTransport(myTransport)}
//	resp, err := client.Post(url, "application/json", body)
//
// One call of RoundTrip is one logical operation. Its key is the
// Idempotency-Key already on the request, else the one in the context
// (ContextWithKey, with KeyFor or DeriveKey for keys that must survive a
// restart), else, for POST and PATCH, a generated one (WithAutoKeys,
// WithKeyGenerator). Network errors, attempt time-outs, 408, 429, 500, 502,
// 503 and 504 are retried for an idempotent method or a keyed request, a keyed
// 409 is polled where it can mean "in progress", and everything else comes
// back as it is; WithRetryIf changes that table, never so that a POST or
// PATCH without a key is repeated. Waits follow a full-jitter backoff and the
// server's Retry-After; every operation is capped by WithMaxElapsed and the
// context's deadline; a retry budget (each Transport's own, or a shared Budget) keeps a failing
// dependency from receiving a multiple of its load.
//
// When the operation ends on an HTTP response, RoundTrip returns it, body
// unread, with a nil error. Otherwise the error is an *Error that says how
// many attempts were made and why the Transport stopped: errors.Is matches
// its cause (ErrExhausted, ErrBudgetExhausted, ErrBodyNotReplayable,
// ErrInvalidKey, the context's error) and the last attempt's error, and its
// Timeout method reports whether a deadline or the cap ended it.
//
// Each attempt's request carries its AttemptInfo (AttemptFromContext);
// WithOnRetry and WithOnDone report retries and ends, WithLogger logs them.
//
// Options are checked when they are made: an impossible value panics there,
// never later on a request, with a message "idem: <Func>(<value>): want
// <what is allowed>", the form every idem package uses (WithMaxAttempts(0)
// panics "idem: WithMaxAttempts(0): want n >= 1"). A zero
// Transport is ready to use, with the defaults of NewTransport(nil) over
// http.DefaultTransport; a zero Budget is NewBudget(0.1, 10).
//
// The rules, exactly: docs/CONTRACT.md (section 1). How to use them, the
// defaults and their reasons: docs/client.md. Coming from go-retryablehttp:
// docs/migrating-from-retryablehttp.md.
package idem
