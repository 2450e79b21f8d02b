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
// Every row runs once for each of Config.Methods. Config.Body is a template:
// each {{id}} (IDPlaceholder) becomes an id unique to the operation, which
// EffectURL and EffectCommand fill in too, so that an effect count is of one
// operation alone. With Config.Strict, a WARN or a SKIP fails the report as
// a FAIL does.
//
// A Run sends only to Config.URL (and Effect's URL), at most the number of
// requests PlanBound returns and at most its number of effect counts, waits
// on purpose no longer than its Wait, and ends within its Time (the rows it
// had no time for are skipped); a request or count past the bound is refused
// (ErrBudget). Report.Sent and Report.Reads say what it used. Requests
// follow no redirect.
package check
