package check

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

func missingKey(ctx context.Context, r *runner) []Row {
	row := Row{ID: "missing-key", Title: "a request without " + r.cfg.KeyHeader,
		Expected: "400 (another 4xx: WARN; processed: WARN, the key is optional)", Source: srcMissing}
	ex := r.send(ctx, reqOpts{})
	row.Got = ex.short()
	switch {
	case ex.failed():
		row.Verdict = Fail
	case ex.status == http.StatusBadRequest:
		row.Verdict = Pass
	case ex.is4xx():
		row.Verdict = Warn
		row.Got += ": refused, but the draft says 400"
	default:
		row.Verdict = Warn
		row.Got += ": processed without a key; a client that forgets the key is not protected"
	}
	if row.Verdict != Pass {
		row.Evidence = evidence(ex)
	}
	return []Row{row}
}

func replay(ctx context.Context, r *runner) []Row {
	op := r.newOperation()
	c0, counted, cerr := r.count(ctx, op.id)
	first := r.send(ctx, reqOpts{keys: []string{op.key}, op: op.id})
	c1, ok1, err1 := r.count(ctx, op.id)

	firstRow := Row{ID: "first-execution", Title: "a first request with a new valid key",
		Expected: "processed (not 5xx), no replay marker", Source: srcFirst, Got: first.short()}
	switch {
	case first.failed():
		firstRow.Verdict = Fail
		firstRow.Got += ": a valid new key is not processed"
	case first.replayed:
		firstRow.Verdict = Fail
		firstRow.Got += ": a first execution marked as a replay"
	case !first.is2xx():
		firstRow.Verdict = Warn
		firstRow.Got += ": the operation refused the body; the rows below compare that refusal"
	default:
		firstRow.Verdict = Pass
	}
	if firstRow.Verdict != Pass {
		firstRow.Evidence = evidence(first)
	}
	rows := []Row{firstRow}
	ids := []struct{ id, title, expected, source string }{
		{"replay-status", "the same request again, same key", "the first status", srcReplay},
		{"replay-body", "the same request again, same key", "the first body, byte for byte", srcReplay},
		{"replay-headers", "the same request again, same key", "Content-Type, Location, ETag as the first; no Set-Cookie", srcReplayHeaders},
		{"replay-marker", "the same request again, same key", r.cfg.ReplayHeader + ": true on the replay only", srcMarker},
		{"replay-effect", "the same request again, same key", "one effect for both requests", srcEffect},
	}
	if first.failed() {
		for _, x := range ids {
			rows = append(rows, skipRow(x.id, x.title, x.expected, x.source, firstFailed(first)))
		}
		return rows
	}
	second := r.send(ctx, reqOpts{keys: []string{op.key}, op: op.id})
	c2, ok2, err2 := r.count(ctx, op.id)
	counted = counted && ok1 && ok2
	cerr = errors.Join(cerr, err1, err2)
	ev := evidence(first, second)

	st := Row{ID: ids[0].id, Title: ids[0].title, Expected: ids[0].expected, Source: ids[0].source,
		Got: fmt.Sprintf("%s, then %s", first.short(), second.short())}
	if second.ok() && second.status == first.status {
		st.Verdict = Pass
	} else {
		st.Verdict, st.Evidence = Fail, ev
	}

	bd := Row{ID: ids[1].id, Title: ids[1].title, Expected: ids[1].expected, Source: ids[1].source}
	switch {
	case !second.ok():
		bd.Verdict, bd.Got, bd.Evidence = Fail, second.short(), ev
	case string(second.body) == string(first.body):
		bd.Verdict, bd.Got = Pass, fmt.Sprintf("%d bytes, identical", len(second.body))
	default:
		bd.Verdict, bd.Evidence = Fail, ev
		bd.Got = fmt.Sprintf("%d bytes then %d bytes, first difference at byte %d", len(first.body), len(second.body), firstDiff(first.body, second.body))
	}

	hd := Row{ID: ids[2].id, Title: ids[2].title, Expected: ids[2].expected, Source: ids[2].source, Verdict: Pass}
	var diffs, same []string
	if second.ok() {
		for _, h := range []string{"Content-Type", "Location", "ETag", "Content-Location"} {
			a, b := first.header.Get(h), second.header.Get(h)
			switch {
			case a == "" && b == "":
			case a != b:
				diffs = append(diffs, fmt.Sprintf("%s %q then %q", h, a, b))
			default:
				same = append(same, h)
			}
		}
	}
	switch {
	case !second.ok():
		hd.Verdict, hd.Got, hd.Evidence = Fail, second.short(), ev
	case len(diffs) > 0:
		hd.Verdict, hd.Got, hd.Evidence = Fail, strings.Join(diffs, "; "), ev
	case len(second.header.Values("Set-Cookie")) > 0:
		hd.Verdict, hd.Evidence = Warn, ev
		hd.Got = "the replay sets a cookie: a stored cookie replayed (a session or CSRF token) belongs to the first response"
	case len(same) == 0:
		hd.Got = "no such header on either answer"
	default:
		hd.Got = strings.Join(same, ", ") + " identical"
	}

	mk := Row{ID: ids[3].id, Title: ids[3].title, Expected: ids[3].expected, Source: ids[3].source}
	switch {
	case !second.ok():
		mk.Verdict, mk.Got, mk.Evidence = Fail, second.short(), ev
	case first.replayed:
		mk.Verdict, mk.Got, mk.Evidence = Fail, "the first execution carries the marker", ev
	case second.replayed:
		mk.Verdict, mk.Got = Pass, fmt.Sprintf("%s: %s on the replay only", r.cfg.ReplayHeader, second.header.Get(r.cfg.ReplayHeader))
	default:
		mk.Verdict, mk.Got, mk.Evidence = Warn, "no "+r.cfg.ReplayHeader+" on the replay: a client cannot tell it from a first execution", ev
	}

	ef := Row{ID: ids[4].id, Title: ids[4].title, Expected: ids[4].expected, Source: ids[4].source}
	switch {
	case r.cfg.Effect == nil:
		ef.Verdict, ef.Got = Skip, "no effect to count (give -effect-url and -effect-json, or -effect-cmd)"
	case !counted:
		ef.Verdict, ef.Got = Skip, "counting the effect failed: "+cerr.Error()
	case c2-c1 > 0:
		ef.Verdict, ef.Evidence = Fail, ev
		ef.Got = fmt.Sprintf("%d effect(s) for the first request, %d more for the replay", c1-c0, c2-c1)
	case c1-c0 == 0:
		ef.Verdict = Warn
		ef.Got = "no effect counted for the first request either: is the count the right one?"
	default:
		ef.Verdict, ef.Got = Pass, fmt.Sprintf("%d effect(s) for the first request, none for the replay", c1-c0)
	}
	return append(rows, st, bd, hd, mk, ef)
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func mismatch(ctx context.Context, r *runner) []Row {
	row := Row{ID: "mismatch", Title: "the same key with another body",
		Expected: "422 (another 4xx: WARN); never the first answer, never a second execution", Source: srcMismatch}
	orig := Row{ID: "mismatch-original-replays", Title: "the original request again, after its key was refused for another body",
		Expected: "the first answer replayed; never a new execution, never refused", Source: srcMismatchOriginal}
	if len(r.cfg.OtherBody) == 0 {
		why := "no other body: give -body2 (the body is not a JSON object to derive one from)"
		return []Row{row.skippedRow(why), orig.skippedRow(why)}
	}
	op := r.newOperation()
	first := r.send(ctx, reqOpts{keys: []string{op.key}, op: op.id})
	if first.failed() {
		return []Row{row.skippedRow(firstFailed(first)), orig.skippedRow(firstFailed(first))}
	}
	other := r.send(ctx, reqOpts{keys: []string{op.key}, op: op.id, body: r.cfg.OtherBody})
	row.Got = other.short()
	refused := false
	switch {
	case other.failed():
		row.Verdict = Fail
	case other.status == http.StatusUnprocessableEntity:
		row.Verdict, refused = Pass, true
	case other.replayed || sameAnswer(first, other):
		row.Verdict = Fail
		row.Got += ": the first answer, replayed for another body (the server ignores the body)"
	case other.is4xx():
		row.Verdict, refused = Warn, true
		row.Got += ": refused, but the draft says 422"
	default:
		row.Verdict = Fail
		row.Got += ": another execution under a key already used"
	}
	if row.Verdict != Pass {
		row.Evidence = evidence(first, other)
	}
	if !refused {
		return []Row{row, orig.skippedRow("the other body was not refused (see mismatch): nothing to retry after")}
	}
	c0, counted, _ := r.count(ctx, op.id)
	again := r.send(ctx, reqOpts{keys: []string{op.key}, op: op.id})
	c1, ok1, _ := r.count(ctx, op.id)
	counted = counted && ok1
	orig.Got = fmt.Sprintf("%s, then %s for the other body, then %s", first.short(), other.short(), again.short())
	orig.Evidence = evidence(first, other, again)
	switch {
	case again.failed():
		orig.Verdict = Fail
	case counted && c1 > c0:
		orig.Verdict = Fail
		orig.Got += fmt.Sprintf(": %d new effect(s): the refusal dropped the record and the operation ran again", c1-c0)
	case again.status == http.StatusUnprocessableEntity:
		orig.Verdict = Fail
		orig.Got += ": the original is now refused: the refused body replaced the record"
	case again.replayed || sameAnswer(first, again):
		orig.Verdict, orig.Evidence = Pass, nil
		orig.Got += ": the first answer"
	case again.status == http.StatusConflict:
		orig.Verdict = Fail
		orig.Got += ": the key is held after the refusal"
	case again.is4xx():
		orig.Verdict = Warn
		orig.Got += ": refused"
	default:
		orig.Verdict = Fail
		orig.Got += ": a new execution: the refusal dropped the record"
	}
	return []Row{row, orig}
}

// preferTolerance is how much longer than Prefer: wait=N a duplicate may
// take and still count as answered within N seconds (the network, the
// server's own timer).
const preferTolerance = 500 * time.Millisecond

func inProgress(ctx context.Context, r *runner, prefer bool) []Row {
	row := Row{ID: "in-progress", Title: "a duplicate while the first request is still running",
		Expected: "409, or a wait that ends with the replay; never a second execution", Source: srcConcurrent}
	var dupExtra []http.Header
	wait := time.Duration(r.cfg.PreferWait) * time.Second
	if prefer {
		row.ID = "in-progress-prefer-wait"
		row.Title += fmt.Sprintf(", with Prefer: wait=%d", r.cfg.PreferWait)
		row.Expected = fmt.Sprintf("409, or the replay, within %ds (judged against the handler's measured run); never a second execution", r.cfg.PreferWait)
		row.Source = srcPreferWait
		dupExtra = []http.Header{{"Prefer": {fmt.Sprintf("wait=%d", r.cfg.PreferWait)}}}
	}
	if len(r.cfg.Slow) == 0 {
		return row.skipped("no headers that make the handler slow: give -slow-H (idem-server: 'Chaos-Delay: 2s')")
	}
	op := r.newOperation()
	c0, counted, _ := r.count(ctx, op.id)
	written := make(chan struct{}, 1)
	firstDone := make(chan *exchange, 1)
	go func() {
		firstDone <- r.send(ctx, reqOpts{keys: []string{op.key}, op: op.id, extra: []http.Header{r.cfg.Slow}, written: written})
	}()
	var first, dup *exchange
	select {
	case <-written:
		if err := sleep(ctx, r.cfg.Grace); err != nil {
			<-firstDone
			row.Verdict, row.Got = Skip, "cut short: "+err.Error()
			return []Row{row}
		}
		dup = r.send(ctx, reqOpts{keys: []string{op.key}, op: op.id, extra: append([]http.Header{r.cfg.Slow}, dupExtra...)})
		first = <-firstDone
	case first = <-firstDone:
		// Written and answered at once (the slow headers ignored), or
		// ended before it was written (no server): which, written says.
	}
	c1, ok1, _ := r.count(ctx, op.id)
	counted = counted && ok1
	if dup == nil {
		select {
		case <-written:
			if !first.failed() {
				row.Verdict, row.Got = Skip, "the first request was over before the duplicate was sent: the slow headers did not make it slow"
				return []Row{row}
			}
		default:
		}
		row.Verdict, row.Got = Fail, "the first request got "+first.short()
		row.Evidence = evidence(first)
		return []Row{row}
	}
	row.Evidence = evidence(first, dup)
	if first.failed() && dup.failed() {
		row.Verdict, row.Got = Fail, fmt.Sprintf("both failed: %s and %s", first.short(), dup.short())
		return []Row{row}
	}
	if !dup.start.Before(first.end) {
		row.Verdict, row.Got, row.Evidence = Skip, "the first request was over before the duplicate was sent: the slow headers did not make it slow", nil
		return []Row{row}
	}
	// Either may have reached the handler first: one is the execution, the
	// other the duplicate.
	exec, other := first, dup
	if first.status == http.StatusConflict || first.replayed {
		exec, other = dup, first
	}
	order := "the duplicate"
	if exec == dup {
		order = "the duplicate reached the handler first; the first request"
	}
	row.Got = fmt.Sprintf("execution %s; %s %s after %s", exec.short(), order, other.short(), other.elapsed().Round(10*time.Millisecond))
	// How long the handler still ran once the duplicate was sent: what
	// Prefer: wait is judged against.
	remaining := exec.end.Sub(dup.start)
	waitedPast := prefer && other == dup && other.elapsed() > wait+preferTolerance
	effects := c1 - c0
	switch {
	case counted && effects > 1:
		row.Verdict = Fail
		row.Got += fmt.Sprintf(": %d effects for one operation", effects)
	case exec.failed():
		row.Verdict = Fail
		row.Got = fmt.Sprintf("the execution failed: %s (duplicate %s)", exec.short(), other.short())
	case other.failed():
		row.Verdict = Fail
		row.Got += ": the duplicate failed"
	case other.status == http.StatusConflict:
		row.Verdict = Pass
		if ra := other.header.Get("Retry-After"); ra != "" {
			row.Got += ", Retry-After: " + ra
		}
		if waitedPast {
			row.Verdict = Warn
			row.Got += fmt.Sprintf(" (held past Prefer: wait=%d; RFC 7240 lets a server ignore it)", r.cfg.PreferWait)
		}
	case other.replayed || sameAnswer(exec, other):
		row.Verdict = Pass
		row.Got += ": waited, then the replay"
		switch {
		case waitedPast:
			row.Verdict = Warn
			row.Got += fmt.Sprintf(" (waited past Prefer: wait=%d while the handler ran %s more; RFC 7240 lets a server ignore it)",
				r.cfg.PreferWait, remaining.Round(10*time.Millisecond))
		case prefer && other == dup && remaining <= wait+preferTolerance:
			row.Verdict, row.Evidence = Skip, nil
			row.Got += fmt.Sprintf(": the handler ended %s after the duplicate was sent, within Prefer: wait=%d, so this says nothing of the preference: give a -slow-H of more than %s",
				remaining.Round(10*time.Millisecond), r.cfg.PreferWait, wait+preferTolerance+r.cfg.Grace)
		}
		if counted && effects == 0 && row.Verdict == Pass {
			row.Verdict = Warn
			row.Got += " (no effect counted: is the count the right one?)"
		}
	case other.is4xx():
		row.Verdict = Warn
		row.Got += ": refused, but the draft says 409"
	default:
		row.Verdict = Fail
		row.Got += ": a second execution of the same operation"
	}
	if row.Verdict == Pass {
		row.Evidence = nil
	}
	return []Row{row}
}

func serverError(ctx context.Context, r *runner) []Row {
	row := Row{ID: "5xx-not-stored", Title: "a retry after the handler answered 5xx",
		Expected: "the retry runs again (a stored 5xx: WARN, the server's choice)", Source: src5xx}
	if len(r.cfg.Fail) == 0 {
		return row.skipped("no headers that make the handler fail: give -fail-H (idem-server: 'Chaos-Fail: 500')")
	}
	op := r.newOperation()
	failed := r.send(ctx, reqOpts{keys: []string{op.key}, op: op.id, extra: []http.Header{r.cfg.Fail}})
	if !failed.is5xx() {
		row.Verdict, row.Got = Skip, "the fail headers did not make it fail: "+failed.short()
		row.Evidence = evidence(failed)
		return []Row{row}
	}
	retry := r.send(ctx, reqOpts{keys: []string{op.key}, op: op.id})
	row.Got = fmt.Sprintf("%s, then %s", failed.short(), retry.short())
	row.Evidence = evidence(failed, retry)
	switch {
	case retry.err != nil:
		row.Verdict = Fail
	case retry.replayed || sameAnswer(failed, retry):
		row.Verdict = Warn
		row.Got += ": the 5xx is stored and replayed (the server's choice; a retry under this key never succeeds)"
	case retry.status == http.StatusConflict:
		row.Verdict = Fail
		row.Got += ": the key stays in progress after the failure; no retry can succeed"
	case retry.is5xx():
		row.Verdict = Warn
		row.Got += ": failed again"
	case retry.status == http.StatusUnprocessableEntity:
		row.Verdict = Fail
		row.Got += ": the same request is refused as another body"
	case retry.is4xx():
		row.Verdict = Warn
		row.Got += ": refused"
	default:
		row.Verdict, row.Evidence = Pass, nil
		row.Got += ": not stored, the retry ran"
	}
	return []Row{row}
}

func scope(ctx context.Context, r *runner) []Row {
	row := Row{ID: "scope", Title: "another principal sends the same key and body",
		Expected: "its own execution: never the other's answer or cookies", Source: srcScope}
	if len(r.cfg.OtherPrincipal) == 0 {
		return row.skipped("no second principal: give -H2 with its credentials")
	}
	op := r.newOperation()
	a := r.send(ctx, reqOpts{keys: []string{op.key}, op: op.id})
	if a.failed() {
		return row.skipped(firstFailed(a))
	}
	b := r.send(ctx, reqOpts{keys: []string{op.key}, op: op.id, extra: []http.Header{r.cfg.OtherPrincipal}})
	row.Got = "the second principal got " + b.short()
	row.Evidence = evidence(a, b)
	cookies := a.header.Values("Set-Cookie")
	leaked := ""
	if b.ok() {
		for _, c := range b.header.Values("Set-Cookie") {
			if slices.Contains(cookies, c) {
				leaked = c
			}
		}
	}
	switch {
	case b.failed():
		row.Verdict = Fail
	case b.status == http.StatusUnauthorized || b.status == http.StatusForbidden:
		row.Verdict = Skip
		row.Got += ": its credentials were refused; check -H2"
	case b.replayed:
		row.Verdict = Fail
		row.Got += ": a replay of the first principal's answer"
	case leaked != "":
		row.Verdict = Fail
		row.Got += ": the first principal's cookie " + truncate([]byte(leaked), 60)
	case sameAnswer(a, b):
		// Byte-equal answers prove a leak only if the answers differ
		// between principals: ask once with a key of the second's own.
		own := r.newOperation()
		c := r.send(ctx, reqOpts{keys: []string{own.key}, op: op.id, extra: []http.Header{r.cfg.OtherPrincipal}})
		row.Evidence = evidence(a, b, c)
		if sameAnswer(a, c) {
			row.Verdict = Warn
			row.Got += ": byte for byte the first principal's answer, but so is its own answer under a new key: cannot tell"
		} else {
			row.Verdict = Fail
			row.Got += ": byte for byte the first principal's answer (its own, under a new key, differs)"
		}
	case b.status == http.StatusConflict || b.status == http.StatusUnprocessableEntity:
		row.Verdict = Warn
		row.Got += ": refused: keys are not scoped per principal (no leak, but one caller's key blocks another's)"
	case b.is4xx():
		row.Verdict = Warn
		row.Got += ": refused"
	default:
		row.Verdict, row.Evidence = Pass, nil
		row.Got += ": its own execution"
	}
	return []Row{row}
}

// invalidKeys are the malformed keys, each sent once.
var invalidKeys = []struct {
	id, what, source string
	keys             func(fresh string) []string
}{
	{"invalid-key-too-long", "a key of 256 characters", srcTooLong,
		func(string) []string { return []string{strings.Repeat("k", 256)} }},
	{"invalid-key-blank", "a blank key", srcInvalid,
		func(string) []string { return []string{""} }},
	{"invalid-key-non-ascii", "a key with non-ASCII bytes (UTF-8)", srcNonASCII,
		func(fresh string) []string { return []string{fresh + "-clé-ключ"} }},
	{"invalid-key-malformed-sf", "a malformed Structured Field (an unterminated quote)", srcInvalid,
		func(fresh string) []string { return []string{`"` + fresh} }},
	{"invalid-key-two-lines", "two " + "Idempotency-Key lines with different keys", srcTwoLines,
		func(fresh string) []string { return []string{fresh + "-a", fresh + "-b"} }},
}

func invalid(ctx context.Context, r *runner) []Row {
	var rows []Row
	for _, k := range invalidKeys {
		row := Row{ID: k.id, Title: k.what, Expected: "4xx (processed: WARN); never 5xx", Source: k.source}
		ex := r.send(ctx, reqOpts{keys: k.keys(r.cfg.NewKey())})
		row.Got = ex.short()
		switch {
		case ex.failed():
			row.Verdict = Fail
			row.Got += ": an invalid key answered as a server error"
		case ex.is4xx():
			row.Verdict = Pass
		default:
			row.Verdict = Warn
			row.Got += ": accepted and processed"
		}
		if row.Verdict != Pass {
			row.Evidence = evidence(ex)
		}
		rows = append(rows, row)
	}
	return rows
}

func quoted(ctx context.Context, r *runner) []Row {
	q := Row{ID: "quoted-key", Title: `the draft's form, Idempotency-Key: "key", sent twice`,
		Expected: "processed, then replayed", Source: srcQuoted}
	raw := Row{ID: "quoted-same-as-raw", Title: `the same key unquoted after its quoted form`,
		Expected: `the replay ("key" and key are one key; two keys: WARN)`, Source: srcQuotedRaw}
	op := r.newOperation()
	key := op.key
	a := r.send(ctx, reqOpts{keys: []string{`"` + key + `"`}, op: op.id})
	switch {
	case a.failed():
		q.Verdict, q.Got, q.Evidence = Fail, a.short()+": the draft's form is not processed", evidence(a)
		return []Row{q, skipRow(raw.ID, raw.Title, raw.Expected, raw.Source, firstFailed(a))}
	case !a.is2xx():
		q.Verdict, q.Got, q.Evidence = Warn, a.short()+": the draft's form is refused", evidence(a)
		return []Row{q, skipRow(raw.ID, raw.Title, raw.Expected, raw.Source, "the quoted form was refused")}
	}
	b := r.send(ctx, reqOpts{keys: []string{`"` + key + `"`}, op: op.id})
	q.Got = fmt.Sprintf("%s, then %s", a.short(), b.short())
	switch {
	case b.failed():
		q.Verdict, q.Evidence = Fail, evidence(a, b)
	case b.replayed || sameAnswer(a, b):
		q.Verdict = Pass
	default:
		q.Verdict, q.Evidence = Fail, evidence(a, b)
		q.Got += ": the retry in the draft's form was not replayed"
	}
	c := r.send(ctx, reqOpts{keys: []string{key}, op: op.id})
	raw.Got = c.short()
	switch {
	case c.failed():
		raw.Verdict, raw.Evidence = Fail, evidence(a, c)
	case c.replayed || sameAnswer(a, c):
		raw.Verdict = Pass
		raw.Got += ": the replay"
	default:
		raw.Verdict, raw.Evidence = Warn, evidence(a, c)
		raw.Got += `: "key" and key are two keys: a client that changes form runs the operation twice`
	}
	return []Row{q, raw}
}

// twoKeyLines sends two Idempotency-Key lines, each a valid key of its own;
// when the server processes the request, one retry under each key alone
// shows which one it used.
func twoKeyLines(ctx context.Context, r *runner) []Row {
	row := Row{ID: "two-key-lines", Title: "two " + r.cfg.KeyHeader + " lines, each a valid key of its own",
		Expected: "4xx; never processed under one of the two keys", Source: srcTwoValidLines}
	a, b := r.newOperation(), r.newOperation()
	both := r.send(ctx, reqOpts{keys: []string{a.key, b.key}, op: a.id})
	row.Got = both.short()
	switch {
	case both.failed():
		row.Verdict = Fail
		row.Got += ": two keys answered as a server error"
		row.Evidence = evidence(both)
		return []Row{row}
	case both.is4xx():
		row.Verdict = Pass
		return []Row{row}
	}
	// Processed: under which key? A retry under each alone, with the same
	// body, is the replay only under the key used.
	first := r.send(ctx, reqOpts{keys: []string{a.key}, op: a.id})
	second := r.send(ctx, reqOpts{keys: []string{b.key}, op: a.id})
	row.Verdict, row.Evidence = Fail, evidence(both, first, second)
	switch {
	case first.replayed || sameAnswer(both, first):
		row.Got += ": processed under the first line's key, silently (a retry with it alone got the replay)"
	case second.replayed || sameAnswer(both, second):
		row.Got += ": processed under the second line's key, silently (a retry with it alone got the replay)"
	default:
		row.Got += ": processed under neither key alone (a retry under each ran again): the request was not protected"
	}
	return []Row{row}
}
