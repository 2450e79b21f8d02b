package check

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// A scenario is a group of rows that share requests.
type scenario struct {
	// requests is the most requests it sends to the URL; reads the most
	// effect counts it takes; wait the time it waits on purpose.
	requests, reads int
	wait            time.Duration
	run             func(ctx context.Context, r *runner) []Row
}

// runner runs the scenarios of one method of a Config.
type runner struct {
	cfg     Config // Method is the one this runner checks
	counter *countingTransport
	client  *http.Client
	// reads counts the effect counts taken, at most readLimit; waited the
	// time cfg.Sleep waited (both shared by the runners of every method).
	reads     *atomic.Int64
	readLimit int64
	waited    *atomic.Int64
}

// A use is what one scenario of a run took, beside what the plan gave it:
// the run's Bound is the sum of the plans, so a scenario past its own share
// would take another's.
type use struct {
	rows                    string // the scenario's first row, "METHOD id"
	requests, reads         int
	wait                    time.Duration
	planRequests, planReads int
	planWait                time.Duration
}

// over says how u went past its plan; "" when it did not.
func (u use) over() string {
	var past []string
	if u.requests > u.planRequests {
		past = append(past, fmt.Sprintf("%d requests, %d planned", u.requests, u.planRequests))
	}
	if u.reads > u.planReads {
		past = append(past, fmt.Sprintf("%d effect counts, %d planned", u.reads, u.planReads))
	}
	if u.wait > u.planWait {
		past = append(past, fmt.Sprintf("waited %s, %s planned", u.wait, u.planWait))
	}
	if len(past) == 0 {
		return ""
	}
	return u.rows + ": " + strings.Join(past, "; ")
}

// A Bound is what a Run of a Config may do at most, known before it sends
// anything: the command announces it, and Run keeps to it.
type Bound struct {
	// Requests is the most requests sent to the operation's URL, over every
	// method; a request past it is refused (ErrBudget).
	Requests int
	// Reads is the most effect counts taken.
	Reads int
	// Wait is the time the run waits on purpose (expiry, retention).
	Wait time.Duration
	// Time bounds the whole run, Wait included (Config.MaxTime): a row not
	// judged by then is skipped.
	Time time.Duration
}

// defaultTimeAllowance is the time a run may take besides its planned waits
// when Config.MaxTime is zero.
const defaultTimeAllowance = 10 * time.Minute

// Plan returns the most requests a Run of cfg sends to cfg.URL, and the most
// effect counts it takes, without sending anything (PlanBound says more).
func Plan(cfg Config) (requests, reads int, err error) {
	b, err := PlanBound(cfg)
	return b.Requests, b.Reads, err
}

// PlanBound returns the Bound of a Run of cfg, without sending anything.
func PlanBound(cfg Config) (Bound, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return Bound{}, err
	}
	return plan(&c, allScenarios(&c)), nil
}

func plan(c *Config, list []scenario) Bound {
	var b Bound
	for _, s := range list {
		b.Requests += s.requests
		b.Reads += s.reads
		b.Wait += s.wait
	}
	b.Time = c.MaxTime
	if b.Time == 0 {
		b.Time = defaultTimeAllowance + b.Wait
	}
	return b
}

// allScenarios are the scenarios of every method, in order; each runs with
// a Config whose Method is its own.
func allScenarios(c *Config) []scenario {
	var list []scenario
	for _, m := range c.Methods {
		mc := *c
		mc.Method = m
		for _, s := range scenarios(&mc) {
			run := s.run
			s.run = func(ctx context.Context, r *runner) []Row {
				mr := *r
				mr.cfg = mc
				rows := run(ctx, &mr)
				for i := range rows {
					rows[i].Method = m
				}
				return rows
			}
			list = append(list, s)
		}
	}
	return list
}

// Run checks the operation cfg describes and reports a row per expectation,
// for each of its methods. It sends at most the requests PlanBound
// announces, all to cfg.URL (chaos mode through a loopback proxy of its own
// in front of it; the mismatch-query row with one more query parameter),
// counts effects with cfg.Effect, and ends within the Bound's Time: rows
// not judged by then are skipped. Only a Config it cannot use, or ctx
// ending, is an error: a server that does not answer is a row's FAIL.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Transport == nil {
		// Its own transport: no connection outlives the run.
		defer c.Transport.(*http.Transport).CloseIdleConnections()
	}
	// Every wait on purpose is counted, in every method's copy of c.
	waited := new(atomic.Int64)
	sleep := c.Sleep
	c.Sleep = func(ctx context.Context, d time.Duration) error {
		waited.Add(int64(d))
		return sleep(ctx, d)
	}
	list := allScenarios(&c)
	bound := plan(&c, list)
	r := &runner{cfg: c, counter: &countingTransport{next: c.Transport, limit: int64(bound.Requests)},
		reads: new(atomic.Int64), readLimit: int64(bound.Reads), waited: waited}
	r.client = &http.Client{Transport: r.counter, CheckRedirect: noRedirects}
	rep := &Report{Method: c.Method, Methods: c.Methods, URL: c.URL, Budget: bound.Requests,
		ReadBudget: bound.Reads, TimeBound: bound.Time, Strict: c.Strict}
	if c.Effect != nil {
		rep.Effect = c.Effect.String()
	}
	start := c.Now()
	runCtx, cancel := context.WithTimeout(ctx, bound.Time)
	defer cancel()
	for _, s := range list {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sent, reads, wait := r.counter.sent.Load(), r.reads.Load(), r.waited.Load()
		var rows []Row
		if runCtx.Err() != nil {
			rows = unjudged(s.run, r, bound.Time, "not run")
		} else {
			rows = s.run(runCtx, r)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if runCtx.Err() != nil {
				// The bound cut the scenario short: its answers say
				// nothing about the server.
				rows = cutShort(rows, bound.Time)
			}
		}
		u := use{requests: int(r.counter.sent.Load() - sent), reads: int(r.reads.Load() - reads),
			wait: time.Duration(r.waited.Load() - wait), planRequests: s.requests, planReads: s.reads, planWait: s.wait}
		if len(rows) > 0 {
			u.rows = strings.TrimSpace(rows[0].Method + " " + rows[0].ID)
		}
		rep.uses = append(rep.uses, u)
		rep.Rows = append(rep.Rows, rows...)
	}
	rep.Sent = int(r.counter.sent.Load())
	rep.Reads = int(r.reads.Load())
	rep.Duration = c.Now().Sub(start)
	return rep, nil
}

// unjudged returns the rows of a scenario the run had no time for, all
// skipped: the scenario runs with a context already done, so it sends
// nothing (a request on a done context is not sent) and only names its rows.
func unjudged(run func(context.Context, *runner) []Row, r *runner, bound time.Duration, what string) []Row {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	rows := run(done, r)
	for i := range rows {
		rows[i].Verdict = Skip
		rows[i].Got = fmt.Sprintf("%s: the run's time bound (%s, -max-time) was reached", what, bound)
		rows[i].Evidence = nil
	}
	return rows
}

func cutShort(rows []Row, bound time.Duration) []Row {
	for i := range rows {
		if rows[i].Verdict == Skip {
			continue
		}
		rows[i].Verdict = Skip
		rows[i].Got = fmt.Sprintf("cut short: the run's time bound (%s, -max-time) was reached; %s", bound, rows[i].Got)
	}
	return rows
}

// noRedirects hands a redirect back as the answer: the check sends only to
// the URL it was given.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

func scenarios(c *Config) []scenario {
	list := []scenario{
		{requests: 1, run: missingKey},
		{requests: 2, reads: 3, run: replay},
		{requests: 3, reads: 2, run: mismatch},
		fieldScenario(c),
		{requests: 2, reads: 2, run: func(ctx context.Context, r *runner) []Row { return inProgress(ctx, r, false) }},
		{requests: 2, reads: 2, run: func(ctx context.Context, r *runner) []Row { return inProgress(ctx, r, true) }},
		{requests: leaseTries * (1 + maxLeaseDuplicates), reads: leaseTries * 2, run: lease},
		{requests: 2, run: serverError},
		{requests: 3, run: scope},
		{requests: len(invalidKeys), run: invalid},
		{requests: 3, run: twoKeyLines},
		{requests: 3, run: quoted},
		retentionScenario(c),
	}
	if c.Chaos {
		list = append(list, chaosScenarios(c)...)
	}
	if c.Effect == nil {
		for i := range list {
			list[i].reads = 0
		}
	}
	return list
}

// count reads the effect count of the operation with id; ok is false
// without an Effect or when it failed (err says why).
func (r *runner) count(ctx context.Context, id string) (n int64, ok bool, err error) {
	if r.cfg.Effect == nil {
		return 0, false, nil
	}
	if err := ctx.Err(); err != nil { // never taken: not counted
		return 0, false, err
	}
	if r.reads.Add(1) > r.readLimit {
		r.reads.Add(-1)
		return 0, false, fmt.Errorf("%w (%d effect counts)", ErrBudget, r.readLimit)
	}
	n, err = forOperation(r.cfg.Effect, id).Count(ctx)
	return n, err == nil, err
}

// deriveOtherBody returns body with one value changed, when body is a JSON
// object: the first number field (in key order) incremented, or else a
// field "idem_check_variant" added. Otherwise nil.
func deriveOtherBody(body []byte) []byte {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil || m == nil {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	changed := false
	for _, k := range keys {
		if n, ok := m[k].(json.Number); ok {
			if i, err := n.Int64(); err == nil {
				m[k] = i + 1
				changed = true
				break
			}
		}
	}
	if !changed {
		m["idem_check_variant"] = 1
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	return out
}

// evidence renders exchanges for a row.
func evidence(exs ...*exchange) []Exchange {
	out := make([]Exchange, 0, len(exs))
	for _, e := range exs {
		if e != nil {
			out = append(out, e.evidence())
		}
	}
	return out
}

// skipped returns row, SKIP because of why, as a scenario's rows.
func (row Row) skipped(why string) []Row {
	return []Row{row.skippedRow(why)}
}

// skippedRow returns row, SKIP because of why.
func (row Row) skippedRow(why string) Row {
	row.Verdict, row.Got = Skip, why
	return row
}

func skipRow(id, title, expected, source, why string) Row {
	return Row{ID: id, Title: title, Verdict: Skip, Expected: expected, Got: why, Source: source}
}

func firstFailed(e *exchange) string {
	return fmt.Sprintf("the first request with a new key got %s, nothing to compare", e.short())
}
