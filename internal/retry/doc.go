// Package retry is idem's retry engine, with no transport in it: one logical
// operation's loop (Op.Run), the decision after each attempt (Decide, a pure
// function of State and Outcome, and its table, Classify), the waits (the
// backoff, the server's Retry-After, host holds, the turns a queueing Limit
// makes an operation wait) and what the operation records (Record).
//
// A transport drives it through Driver: the engine asks for attempts and the
// driver makes them, maps what they came to onto Outcome (an HTTP status or a
// gRPC code becomes Final, Failing or InProgress), rewinds the request, lets
// answers go and turns the Result into its own answer. Package idem's
// RoundTripper is one such driver. What retries are paid from is a Limit
// (idem.Budget). docs/contributing.md draws the map.
//
//	op := retry.New(ctx, retry.Plan{Start: time.Now(), Bounds: b, Backoff: bo,
//		Request: retry.Request{Keyed: true, Replayable: true}, Rand: rand.Float64}, driver)
//	res := op.Run() // res.Answer: the driver's latest answer is the result; else res.Cause
package retry
