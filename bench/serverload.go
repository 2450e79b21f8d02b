package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/internal/demo"
	"github.com/idemkit/idem/internal/demo/payments"
	"github.com/idemkit/idem/server"
)

// StoreTarget is one idempotency store measured by section 5. Adding a store
// is one more StoreTarget in ServerStores (stores.go) and, for a store in a
// module of its own, a require with a replace in bench/go.mod.
type StoreTarget struct {
	Name string
	// Open sets up a fresh store for workers concurrent requests, on tables or
	// keys of its own. An error (the database is not reachable, say) skips the
	// store; the report says why.
	Open func(ctx context.Context, workers int) (*StoreRig, error)
	// Env lists the variables an optional topology is configured by; while one
	// is unset, Open fails with ErrNotSet and the store is not measured.
	Env []string
}

// StoreRig is an opened store and what its rows are measured with.
type StoreRig struct {
	Store server.Store
	// Ledger is where the payments handler writes, with and without idem.
	Ledger payments.Ledger
	// Baseline names what the store is compared to: the same payments handler,
	// on the same Ledger, without idem. Stores with the same Baseline share its
	// rows.
	Baseline string
	// WrapBaseline wraps the payments handler for the baseline rows (to give it
	// a transaction of its own, say); nil serves the handler as it is.
	WrapBaseline func(http.Handler) http.Handler
	// RoundTrips, when not nil, returns the round trips sent to the store's
	// server so far.
	RoundTrips func() int64
	// Server names the server the store talks to and its version ("Redis
	// 7.0.15"); empty for an in-process store.
	Server string
	// Close releases the rig and deletes what it wrote (tables, keys).
	Close func() error
}

// Section 5's cases and modes, as ServerLoadResult names them.
const (
	CaseBaseline = "baseline" // the payments handler without idem
	CaseNewKey   = "new key"  // every request a new operation: a claim, the handler, a record
	CaseReplay   = "replay"   // every request repeats a finished operation

	ModeSequential = "sequential" // one closed-loop worker
	ModeParallel   = "parallel"   // ServerLoadConfig.Workers closed-loop workers
)

// ServerLoadConfig sets up section 5: closed-loop clients POST payments for
// Duration to the demo payments server (internal/demo.Handler, no faults),
// after Warmup of the same load that is not counted; one client in the
// sequential rows, Workers in the parallel ones. Every row is measured Rounds
// times, interleaved with the others: its throughput is the median of the
// rounds', its latencies are pooled.
type ServerLoadConfig struct {
	Workers  int
	Duration time.Duration
	Warmup   time.Duration
	Rounds   int
}

// ServerLoadResult is one row of section 5.
type ServerLoadResult struct {
	// Store is the store's name; empty in a baseline row.
	Store string
	// Baseline is the name of the baseline the row is compared to (or is).
	Baseline string
	Case     string // CaseBaseline, CaseNewKey or CaseReplay
	Mode     string // ModeSequential or ModeParallel
	Workers  int
	Requests int
	Errors   int
	// FirstError is the first failed request's error, if any.
	FirstError string
	// Throughput is in successful requests per second: the median of the
	// rounds', so that a stall in one round (other work on the machine, a
	// checkpoint) does not decide it.
	Throughput float64
	P50, P99   time.Duration
	// Max is the slowest request: a stall (a checkpoint, other work on the
	// machine) shows here, and costs a single client its whole length.
	Max time.Duration
	// Ratio is the throughput relative to the baseline's, in the same mode:
	// the median over the rounds of the row's throughput in a round ÷ the
	// baseline's in the same round, the two measured seconds apart, so that
	// other work on the machine that comes and goes between rounds cancels
	// out (section 1 compares in rounds the same way).
	Ratio float64
	// AddedP50 and AddedP99 are P50 and P99 minus the baseline's, in the same mode.
	AddedP50, AddedP99 time.Duration
	// RoundTrips is the mean number of round trips per request to the store's
	// server (the database's, for a baseline on it: the handler's own
	// statements count too), or -1 where they are not counted.
	RoundTrips float64
	// AddedRoundTrips is RoundTrips minus the baseline's, or 0 where either is
	// not counted.
	AddedRoundTrips float64

	lat    []time.Duration
	rounds []float64 // each round's throughput
	trips  int64
}

// Label names the row's subject: the store, or the baseline in a baseline row.
func (r ServerLoadResult) Label() string {
	if r.Case == CaseBaseline {
		return r.Baseline
	}
	return r.Store
}

// ServerLoadReport holds the rows and the stores that could not be measured.
type ServerLoadReport struct {
	Rows    []ServerLoadResult
	Skipped map[string]string // store name -> why
	// Servers holds the server each measured store talked to, by store name.
	Servers map[string]string
}

// serverRow is one row to measure: the target whose rig serves it, a case and
// a number of workers.
type serverRow struct {
	target   StoreTarget
	store    string // "" for a baseline row
	baseline string
	kind     string
	mode     string
	workers  int
}

// RunServerLoad measures, sequentially and in parallel, each store's baseline
// and each store with new keys and with replays.
func RunServerLoad(ctx context.Context, cfg ServerLoadConfig, stores []StoreTarget) (ServerLoadReport, error) {
	if cfg.Workers <= 0 || cfg.Duration <= 0 || cfg.Rounds <= 0 || cfg.Warmup < 0 {
		return ServerLoadReport{}, fmt.Errorf("bench: RunServerLoad: Workers, Duration and Rounds must be positive")
	}
	rep := ServerLoadReport{Skipped: map[string]string{}, Servers: map[string]string{}}
	type opened struct {
		target   StoreTarget
		baseline string
	}
	var reachable []opened
	for _, st := range stores {
		rig, err := st.Open(ctx, cfg.Workers) // is it reachable at all?
		if err != nil {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			rep.Skipped[st.Name] = err.Error()
			continue
		}
		baseline := rig.Baseline
		if rig.Server != "" {
			rep.Servers[st.Name] = rig.Server
		}
		if err := rig.Close(); err != nil {
			return rep, fmt.Errorf("bench: server load %s: close: %w", st.Name, err)
		}
		reachable = append(reachable, opened{st, baseline})
	}
	var rows []serverRow
	for _, m := range []struct {
		name    string
		workers int
	}{{ModeSequential, 1}, {ModeParallel, cfg.Workers}} {
		for _, o := range reachable {
			if !slices.ContainsFunc(rows, func(r serverRow) bool {
				return r.kind == CaseBaseline && r.baseline == o.baseline && r.mode == m.name
			}) {
				rows = append(rows, serverRow{target: o.target, baseline: o.baseline, kind: CaseBaseline, mode: m.name, workers: m.workers})
			}
			rows = append(rows,
				serverRow{target: o.target, store: o.target.Name, baseline: o.baseline, kind: CaseNewKey, mode: m.name, workers: m.workers},
				serverRow{target: o.target, store: o.target.Name, baseline: o.baseline, kind: CaseReplay, mode: m.name, workers: m.workers})
		}
	}
	results := make([]ServerLoadResult, len(rows))
	for range cfg.Rounds {
		for i, row := range rows {
			if err := measureRow(ctx, cfg, row, &results[i]); err != nil {
				return rep, err
			}
		}
	}
	for i, row := range rows {
		r := &results[i]
		r.Store, r.Baseline, r.Case, r.Mode, r.Workers = row.store, row.baseline, row.kind, row.mode, row.workers
		slices.Sort(r.lat)
		r.Requests = len(r.lat)
		r.Throughput = median(r.rounds)
		r.P50, r.P99, r.Max = percentile(r.lat, 0.50), percentile(r.lat, 0.99), r.lat[len(r.lat)-1]
		r.RoundTrips = -1
		if r.trips >= 0 {
			r.RoundTrips = float64(r.trips) / float64(r.Requests+r.Errors)
		}
		r.lat = nil
	}
	for i := range results {
		r := &results[i]
		b := results[slices.IndexFunc(rows, func(b serverRow) bool {
			return b.kind == CaseBaseline && b.baseline == rows[i].baseline && b.mode == rows[i].mode
		})]
		r.Ratio = median(perRoundRatio(r.rounds, b.rounds))
		r.AddedP50, r.AddedP99 = r.P50-b.P50, r.P99-b.P99
		if r.RoundTrips >= 0 && b.RoundTrips >= 0 {
			r.AddedRoundTrips = r.RoundTrips - b.RoundTrips
		}
	}
	for i := range results {
		results[i].rounds = nil
	}
	rep.Rows = results
	return rep, nil
}

// measureRow opens a fresh rig for row, measures one round of it and adds
// the round to r.
func measureRow(ctx context.Context, cfg ServerLoadConfig, row serverRow, r *ServerLoadResult) (err error) {
	name := row.store
	if name == "" {
		name = row.baseline
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("bench: server load %s, %s, %s: %w", name, row.kind, row.mode, err)
		}
	}()
	rig, err := row.target.Open(ctx, cfg.Workers)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, rig.Close()) }()
	create := http.Handler(http.HandlerFunc((&payments.API{Ledger: rig.Ledger}).Create))
	var h http.Handler
	path := "/payments"
	switch {
	case row.kind != CaseBaseline:
		h = demo.Handler(rig.Store, rig.Ledger, nil)
	case rig.WrapBaseline != nil:
		h = rig.WrapBaseline(create)
	default:
		h, path = demo.Handler(rig.Store, rig.Ledger, nil), "/payments/unprotected"
	}
	w := cfg
	w.Workers = row.workers
	got, err := loadOnce(ctx, w, h, path, row.kind == CaseReplay, rig.RoundTrips)
	if err != nil {
		return err
	}
	r.lat = append(r.lat, got.lat...)
	r.Errors += got.errors
	if r.FirstError == "" && got.firstErr != nil {
		r.FirstError = got.firstErr.Error()
	}
	r.rounds = append(r.rounds, float64(len(got.lat))/got.elapsed.Seconds())
	if rig.RoundTrips == nil || r.trips < 0 {
		r.trips = -1
	} else {
		r.trips += got.trips
	}
	return nil
}

// load is what one measured drive of loadOnce saw.
type load struct {
	lat      []time.Duration // of the successful requests
	errors   int             // failed requests
	firstErr error           // the first failure, if any
	elapsed  time.Duration
	trips    int64 // round trips the store made, when counted
}

// loadOnce serves h and drives path with cfg.Workers closed-loop workers,
// first for cfg.Warmup (not counted), then for cfg.Duration. With replay, each
// worker repeats one key (every request after its first is a replay);
// otherwise every request carries a new key. When trips is not nil, it counts
// the round trips the store made in the measured time.
func loadOnce(ctx context.Context, cfg ServerLoadConfig, h http.Handler, path string, replay bool, trips func() int64) (load, error) {
	srv := httptest.NewServer(h)
	defer srv.Close()
	tr := newBaseTransport()
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	url := srv.URL + path

	var seq atomic.Int64
	send := func(key string) (time.Duration, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(paymentBody))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		d := time.Since(start)
		if err == nil && resp.StatusCode != http.StatusCreated {
			err = fmt.Errorf("status %d: %.200s", resp.StatusCode, body)
		}
		return d, err
	}
	keys := make([]string, cfg.Workers)
	for w := range keys {
		keys[w] = "load-" + strconv.FormatInt(seq.Add(1), 10)
	}
	drive := func(d time.Duration) (load, error) {
		lat := make([][]time.Duration, cfg.Workers)
		errs := make([]int, cfg.Workers)
		var firstErr error
		var errOnce sync.Once
		var wg sync.WaitGroup
		start := time.Now()
		deadline := start.Add(d)
		for w := range cfg.Workers {
			wg.Go(func() {
				// Every worker sends at least one request, however late it starts.
				for first := true; (first || time.Now().Before(deadline)) && ctx.Err() == nil; first = false {
					key := keys[w]
					if !replay {
						key = "load-" + strconv.FormatInt(seq.Add(1), 10)
					}
					d, err := send(key)
					if err != nil {
						errs[w]++
						errOnce.Do(func() { firstErr = err })
						continue
					}
					lat[w] = append(lat[w], d)
				}
			})
		}
		wg.Wait()
		got := load{lat: slices.Concat(lat...), firstErr: firstErr, elapsed: time.Since(start)}
		if err := ctx.Err(); err != nil {
			return load{}, err
		}
		for _, e := range errs {
			got.errors += e
		}
		if len(got.lat) == 0 {
			return load{}, fmt.Errorf("no request succeeded: %w", firstErr)
		}
		return got, nil
	}
	// The warm-up opens every worker's connection, loads the store's scripts
	// or statements and, for replays, records each worker's key; it is not
	// counted.
	for w := range keys {
		if _, err := send(keys[w]); err != nil {
			return load{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	if cfg.Warmup > 0 {
		if _, err := drive(cfg.Warmup); err != nil {
			return load{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	var before int64
	if trips != nil {
		before = trips()
	}
	got, err := drive(cfg.Duration)
	if trips != nil {
		got.trips = trips() - before
	}
	return got, err
}

// median returns the median of xs, which must not be empty.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// percentile returns the q-quantile (nearest rank) of sorted, which must not be empty.
func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
