package check

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// maxProbes bounds the retries of the retention-window row.
const maxProbes = 20

// A retention plan is when the expiry and retention rows retry their keys,
// as times after their first requests, all within Config.MaxWait: one
// schedule, so that their waits overlap.
type retentionPlan struct {
	expiry      time.Duration   // 0: not run (skipExpiry says why)
	replayAfter time.Duration   // 0: not run (skipReplayAfter says why)
	window      []time.Duration // nil: not run (skipWindow says why)

	skipExpiry, skipReplayAfter, skipWindow string
}

// planRetention fits the rows' retries into the wait budget.
func planRetention(c *Config) retentionPlan {
	var p retentionPlan
	budget := fmt.Sprintf("the wait budget of %s (-max-wait)", c.MaxWait)
	switch {
	case c.TTL <= 0:
		p.skipExpiry = "no TTL given: give -ttl with the server's documented expiry"
		p.skipWindow = p.skipExpiry
	case c.TTL+c.TTLMargin > c.MaxWait:
		p.skipExpiry = fmt.Sprintf("it would wait %s (-ttl + -ttl-margin), past %s: give a -max-wait of at least that to run it",
			c.TTL+c.TTLMargin, budget)
	default:
		p.expiry = c.TTL + c.TTLMargin
	}
	if c.TTL > 0 {
		end := min(c.TTL-c.TTLMargin, c.MaxWait)
		if end < time.Second {
			p.skipWindow = fmt.Sprintf("the window (-ttl %s less -ttl-margin %s, within -max-wait %s) is under a second", c.TTL, c.TTLMargin, c.MaxWait)
		} else {
			for t := time.Second; t < end && len(p.window) < maxProbes-1; t *= 2 {
				p.window = append(p.window, t)
			}
			p.window = append(p.window, end)
		}
	}
	switch {
	case c.ReplayAfter <= 0:
		p.skipReplayAfter = "no time given: give -replay-after with a time the server says it still keeps the record"
	case c.ReplayAfter > c.MaxWait:
		p.skipReplayAfter = fmt.Sprintf("it would wait %s, past %s", c.ReplayAfter, budget)
	default:
		p.replayAfter = c.ReplayAfter
	}
	return p
}

// wait is the longest wait of the plan.
func (p retentionPlan) wait() time.Duration {
	w := max(p.expiry, p.replayAfter)
	if len(p.window) > 0 {
		w = max(w, p.window[len(p.window)-1])
	}
	return w
}

func retentionScenario(c *Config) scenario {
	p := planRetention(c)
	n := len(p.window)
	if n > 0 {
		n++ // the first request
	}
	if p.expiry > 0 {
		n += 2
	}
	if p.replayAfter > 0 {
		n += 2
	}
	return scenario{requests: n, wait: p.wait(), run: func(ctx context.Context, r *runner) []Row { return retention(ctx, r, p) }}
}

// A retry is one request of the schedule: at a time after the first
// requests, under the key of one row.
type retry struct {
	at  time.Duration
	row int // index into the rows of retention
}

func retention(ctx context.Context, r *runner, p retentionPlan) []Row {
	exp := Row{ID: "expiry", Title: "the same key after the TTL you gave", Expected: "a new execution", Source: srcExpiry}
	after := Row{ID: "replay-after", Title: "the same key after the time you named", Expected: "the replay", Source: srcReplayAfter}
	win := Row{ID: "retention-window", Title: "the same key retried over the retention the server documents",
		Expected: "the replay at each retry", Source: srcRetention}
	if p.expiry > 0 {
		exp.Expected = fmt.Sprintf("a new execution after %s + %s", r.cfg.TTL, r.cfg.TTLMargin)
	}
	if p.replayAfter > 0 {
		after.Expected = fmt.Sprintf("the replay after %s", p.replayAfter)
	}
	if len(p.window) > 0 {
		win.Expected = fmt.Sprintf("the replay at each of %d retries over %s (of a %s retention)", len(p.window), p.window[len(p.window)-1], r.cfg.TTL)
	}
	rows := []Row{exp, after, win}
	skips := []string{p.skipExpiry, p.skipReplayAfter, p.skipWindow}
	ops := make([]operation, len(rows))
	firsts := make([]*exchange, len(rows))
	var schedule []retry
	for i, at := range [][]time.Duration{{p.expiry}, {p.replayAfter}, p.window} {
		if skips[i] != "" || len(at) == 0 || at[0] == 0 {
			rows[i] = rows[i].skippedRow(skips[i])
			continue
		}
		ops[i] = r.newOperation()
		firsts[i] = r.send(ctx, reqOpts{keys: []string{ops[i].key}, op: ops[i].id})
		if firsts[i].failed() {
			rows[i] = rows[i].skippedRow(firstFailed(firsts[i]))
			continue
		}
		for _, t := range at {
			schedule = append(schedule, retry{at: t, row: i})
		}
	}
	slices.SortStableFunc(schedule, func(a, b retry) int { return cmp.Compare(a.at, b.at) })
	answers := make([][]*exchange, len(rows))
	var waited time.Duration
	for _, s := range schedule {
		if err := r.cfg.Sleep(ctx, s.at-waited); err != nil {
			for i := range rows {
				if rows[i].Verdict == "" {
					rows[i] = rows[i].skippedRow("the wait was cut short: " + err.Error())
				}
			}
			return rows
		}
		waited = s.at
		answers[s.row] = append(answers[s.row], r.send(ctx, reqOpts{keys: []string{ops[s.row].key}, op: ops[s.row].id}))
	}
	if rows[0].Verdict == "" {
		rows[0] = judgeExpiry(rows[0], firsts[0], answers[0][0])
	}
	if rows[1].Verdict == "" {
		rows[1] = judgeStillKept(rows[1], firsts[1], answers[1], []time.Duration{p.replayAfter})
	}
	if rows[2].Verdict == "" {
		rows[2] = judgeStillKept(rows[2], firsts[2], answers[2], p.window)
	}
	return rows
}

func judgeExpiry(row Row, a, b *exchange) Row {
	row.Got = fmt.Sprintf("%s, then %s", a.short(), b.short())
	row.Evidence = evidence(a, b)
	switch {
	case b.failed():
		row.Verdict = Fail
	case b.replayed || sameAnswer(a, b):
		row.Verdict = Fail
		row.Got += ": still replayed after the TTL"
	case b.status == http.StatusConflict || b.status == http.StatusUnprocessableEntity:
		row.Verdict = Fail
		row.Got += ": the key is still held after the TTL"
	default:
		row.Verdict, row.Evidence = Pass, nil
		row.Got += ": a new execution"
	}
	return row
}

// judgeStillKept wants each retry, at the times given, to be the replay of
// first.
func judgeStillKept(row Row, first *exchange, retries []*exchange, at []time.Duration) Row {
	var got []string
	for i, b := range retries {
		got = append(got, fmt.Sprintf("%s: %s", at[i], b.short()))
		switch {
		case b.replayed || sameAnswer(first, b):
			continue
		case b.failed():
			row.Verdict = Fail
		case b.status == http.StatusConflict || b.status == http.StatusUnprocessableEntity:
			row.Verdict = Fail
			got[i] += " (the key is held, but its answer is gone)"
		case b.is4xx():
			row.Verdict = Warn
			got[i] += " (refused)"
		default:
			row.Verdict = Fail
			got[i] += fmt.Sprintf(": a new execution: the record was gone %s after it was made", at[i])
		}
		row.Got = strings.Join(got, "; ")
		row.Evidence = evidence(first, b)
		return row
	}
	row.Verdict = Pass
	row.Got = fmt.Sprintf("%s, then the replay at %s", first.short(), strings.Join(durations(at), ", "))
	return row
}

func durations(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return out
}
