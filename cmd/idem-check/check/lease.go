package check

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// maxLeaseDuplicates bounds the duplicates of the lease row: one a
// LeaseStep while the first request runs.
const maxLeaseDuplicates = 60

// leaseTries is how many operations the lease row tries before it gives up
// on one whose slow request the server executed: a duplicate sent after the
// slow request was written may still reach the handler first (on a loaded
// machine), which then executes the duplicate, quickly, and replays it to
// the slow request; such a run shows nothing of a lease.
const leaseTries = 3

// lease sends one request made slower than any lease the server may hold
// (Config.LeaseSlow) and, while it runs, a duplicate every LeaseStep, each
// on its own, until its answer arrives: a claim that expires under a
// handler still running lets a later duplicate execute a second time. A run
// whose slow request was answered with the replay of a duplicate's execution
// is tried again with another operation, up to leaseTries, unless it shows
// two executions already.
func lease(ctx context.Context, r *runner) []Row {
	row := Row{ID: "in-progress-lease", Title: "duplicates spread over a slow handler's whole run, past any lease",
		Expected: "never a second execution: each duplicate 409 or the replay", Source: srcLease}
	if len(r.cfg.LeaseSlow) == 0 {
		return row.skipped("no headers that make the handler slower than the server's lease: give -lease-H (or -slow-H)")
	}
	for try := 1; ; try++ {
		got, overtaken := leaseOnce(ctx, r, row)
		switch {
		case !overtaken || got.Verdict == Fail:
			return []Row{got}
		case try == leaseTries || ctx.Err() != nil:
			got.Verdict = Skip
			got.Got = fmt.Sprintf("in %d operations a duplicate reached the handler before the slow request, which got the "+
				"duplicate's answer replayed: nothing to judge (the last: %s)", try, got.Got)
			return []Row{got}
		}
	}
}

// leaseOnce is one operation of the lease row; overtaken says that the slow
// request's answer was a replay (a duplicate executed first).
func leaseOnce(ctx context.Context, r *runner, row Row) (_ Row, overtaken bool) {
	op := r.newOperation()
	c0, counted, _ := r.count(ctx, op.id)
	written := make(chan struct{}, 1)
	firstDone := make(chan *exchange, 1)
	go func() {
		firstDone <- r.send(ctx, reqOpts{keys: []string{op.key}, op: op.id, extra: []http.Header{r.cfg.LeaseSlow}, written: written})
	}()
	var first *exchange
	var dups []*exchange
	var mu sync.Mutex
	var wg sync.WaitGroup
	select {
	case <-written:
		tick := time.NewTicker(r.cfg.LeaseStep)
	loop:
		for n := 0; n < maxLeaseDuplicates; n++ {
			select {
			case first = <-firstDone:
				break loop
			case <-ctx.Done():
				break loop
			case <-tick.C:
			}
			wg.Go(func() {
				ex := r.send(ctx, reqOpts{keys: []string{op.key}, op: op.id})
				mu.Lock()
				dups = append(dups, ex)
				mu.Unlock()
			})
		}
		tick.Stop()
		if first == nil {
			first = <-firstDone
		}
	case first = <-firstDone:
	}
	wg.Wait()
	c1, ok1, _ := r.count(ctx, op.id)
	counted = counted && ok1
	sort.Slice(dups, func(i, j int) bool { return dups[i].start.Before(dups[j].start) })

	ran := first.elapsed().Round(10 * time.Millisecond)
	row.Got = fmt.Sprintf("the handler ran %s; %d duplicate(s), one every %s: %s", ran, len(dups), r.cfg.LeaseStep, statusCounts(dups))
	overtaken = first.replayed
	// Executions: distinct successful answers (a replay is the same answer).
	var execs []*exchange
	for _, ex := range append([]*exchange{first}, dups...) {
		if !ex.is2xx() {
			continue
		}
		seen := false
		for _, e := range execs {
			if sameAnswer(e, ex) {
				seen = true
			}
		}
		if !seen {
			execs = append(execs, ex)
		}
	}
	var failedDups []*exchange
	inProgress := 0 // duplicates that found the operation still running
	for _, d := range dups {
		if d.failed() {
			failedDups = append(failedDups, d)
		}
		if heldBack(d, first, r.cfg.LeaseStep) {
			inProgress++
		}
	}
	switch {
	case counted && c1-c0 > 1:
		row.Verdict, row.Evidence = Fail, evidence(append([]*exchange{first}, dups...)[:min(len(dups)+1, 4)]...)
		row.Got += fmt.Sprintf(": %d effects for one operation", c1-c0)
	case len(execs) > 1:
		row.Verdict, row.Evidence = Fail, evidence(execs[:min(len(execs), 3)]...)
		row.Got += fmt.Sprintf(": %d different answers: the operation ran %d times", len(execs), len(execs))
	case first.failed():
		row.Verdict, row.Evidence = Skip, evidence(first)
		row.Got = fmt.Sprintf("the slow request got %s after %s: nothing to judge (is -lease-H a delay the server allows?)", first.short(), ran)
	case len(dups) == 0:
		row.Verdict = Skip
		row.Got = fmt.Sprintf("the handler ran %s, less than one step of %s: the lease headers did not make it slow", ran, r.cfg.LeaseStep)
	case r.cfg.Lease > 0 && first.elapsed() <= r.cfg.Lease:
		row.Verdict = Skip
		row.Got += fmt.Sprintf(": the run did not outlast the lease of %s (-lease): give a slower -lease-H", r.cfg.Lease)
	case len(failedDups) > 0:
		row.Verdict, row.Evidence = Warn, evidence(first, failedDups[0])
		row.Got += fmt.Sprintf(": %d duplicate(s) failed", len(failedDups))
	case inProgress == 0:
		row.Verdict = Skip
		row.Got += ": no duplicate found the operation in progress (none answered 409 or held): each may have come after " +
			"a handler already done (were the lease headers ignored?), so this shows nothing of a lease"
	default:
		row.Verdict = Pass
		row.Got += ": one execution"
		if counted && c1-c0 == 0 {
			row.Verdict = Warn
			row.Got += " (no effect counted: is the count the right one?)"
		}
	}
	return row, overtaken
}

// heldBack says that the duplicate d found the operation in progress on the
// server: it was answered 409, or it was held until the first ended and
// answered with the replay, its round trip a step or more (a duplicate sent
// a step into a run of three is held two). A replay that came back sooner
// may have been sent after a handler already done, which a loaded client
// reads late: the row cannot tell, and does not count it.
func heldBack(d, first *exchange, step time.Duration) bool {
	switch {
	case d.err != nil:
		return false
	case d.status == http.StatusConflict:
		return true
	default:
		return (d.replayed || sameAnswer(d, first)) && d.elapsed() >= step
	}
}

// statusCounts summarises answers: "12×409, 1×201 (replay marker)".
func statusCounts(exs []*exchange) string {
	if len(exs) == 0 {
		return "none"
	}
	n := map[string]int{}
	var order []string
	for _, ex := range exs {
		s := ex.short()
		if ex.err != nil {
			s = "no answer"
		}
		if n[s] == 0 {
			order = append(order, s)
		}
		n[s]++
	}
	parts := make([]string, len(order))
	for i, s := range order {
		parts[i] = fmt.Sprintf("%d×%s", n[s], s)
	}
	return strings.Join(parts, ", ")
}
