package check

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
)

// A scenario is a group of rows that share requests.
type scenario struct {
	// requests is the most requests it sends to the URL; reads the most
	// effect counts it takes.
	requests, reads int
	run             func(ctx context.Context, r *runner) []Row
}

// runner runs the scenarios of one Config.
type runner struct {
	cfg     Config
	counter *countingTransport
	client  *http.Client
}

// Plan returns the most requests a Run of cfg sends to cfg.URL, and the most
// effect counts it takes, without sending anything.
func Plan(cfg Config) (requests, reads int, err error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return 0, 0, err
	}
	for _, s := range scenarios(&c) {
		requests += s.requests
		reads += s.reads
	}
	return requests, reads, nil
}

// Run checks the operation cfg describes and reports a row per expectation.
// It sends at most the requests Plan announces, all to cfg.URL (chaos mode
// through a loopback proxy of its own in front of it), and counts effects
// with cfg.Effect. Only a Config it cannot use is an error: a server that
// does not answer is a row's FAIL.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Transport == nil {
		// Its own transport: no connection outlives the run.
		defer c.Transport.(*http.Transport).CloseIdleConnections()
	}
	list := scenarios(&c)
	budget := 0
	for _, s := range list {
		budget += s.requests
	}
	r := &runner{cfg: c, counter: &countingTransport{next: c.Transport, limit: int64(budget)}}
	r.client = &http.Client{Transport: r.counter, CheckRedirect: noRedirects}
	rep := &Report{Method: c.Method, URL: c.URL, Budget: budget}
	if c.Effect != nil {
		rep.Effect = c.Effect.String()
	}
	start := c.Now()
	for _, s := range list {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rep.Rows = append(rep.Rows, s.run(ctx, r)...)
	}
	rep.Sent = int(r.counter.sent.Load())
	rep.Duration = c.Now().Sub(start)
	return rep, nil
}

// noRedirects hands a redirect back as the answer: the check sends only to
// the URL it was given.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

func scenarios(c *Config) []scenario {
	list := []scenario{
		{requests: 1, run: missingKey},
		{requests: 2, reads: 3, run: replay},
		{requests: 2, run: mismatch},
		{requests: 2, reads: 2, run: func(ctx context.Context, r *runner) []Row { return inProgress(ctx, r, false) }},
		{requests: 2, reads: 2, run: func(ctx context.Context, r *runner) []Row { return inProgress(ctx, r, true) }},
		{requests: 2, run: serverError},
		{requests: 3, run: scope},
		{requests: len(invalidKeys), run: invalid},
		{requests: 3, run: quoted},
		{requests: 2, run: expiry},
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

// count reads the effect count; ok is false without an Effect or when it
// failed (err says why).
func (r *runner) count(ctx context.Context) (n int64, ok bool, err error) {
	if r.cfg.Effect == nil {
		return 0, false, nil
	}
	n, err = r.cfg.Effect.Count(ctx)
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
	row.Verdict, row.Got = Skip, why
	return []Row{row}
}

func skipRow(id, title, expected, source, why string) Row {
	return Row{ID: id, Title: title, Verdict: Skip, Expected: expected, Got: why, Source: source}
}

func firstFailed(e *exchange) string {
	return fmt.Sprintf("the first request with a new key got %s, nothing to compare", e.short())
}
