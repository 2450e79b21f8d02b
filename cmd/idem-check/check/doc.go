// Package check is the engine of idem-check: it checks, from the outside, how
// one operation of any HTTP API honours Idempotency-Key, against
// draft-ietf-httpapi-idempotency-key-header (revision 07) and Stripe's
// documented idempotent requests, and reports a Row per expectation: PASS,
// WARN (allowed, but a client should know), FAIL or SKIP (a setting it needs
// was not given), with what was expected, what came back, the words behind
// the row and, for a FAIL or WARN, the requests and answers that show it.
//
//	rep, err := check.Run(ctx, check.Config{
//		URL:    "http://127.0.0.1:8080/payments",
//		Body:   []byte(`{"customer":"cus_1","amount":100,"currency":"EUR"}`),
//		Header: http.Header{"Authorization": {"Bearer alice"}},
//	})
//	if err != nil { ... }          // only a Config it cannot use
//	rep.WriteText(os.Stdout, false) // or WriteJSON, WriteJUnit
//	if rep.Failed() { ... }
//
// What makes the handler slow or fail is the caller's to say (Config.Slow,
// Config.Fail: headers such as idem-server's Chaos-Delay and Chaos-Fail), and
// so is how to count the operation's effects (Config.Effect: EffectURL or
// EffectCommand). With Config.Chaos, a loopback proxy of its own loses
// answers after the server acted and sends concurrent duplicates, and the
// rows count duplicate effects per operation under each fault.
//
// A Run sends only to Config.URL (and Effect's URL), at most the number of
// requests Plan returns; a request past it is refused (ErrBudget). Requests
// follow no redirect.
package check
