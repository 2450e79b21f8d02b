package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/chaos"
	"github.com/idemkit/idem/server/memstore"
	"github.com/idemkit/idem/server/payments"
)

// StoreTarget is one idempotency store measured by section 5. Adding a store
// (the PostgreSQL and Redis stores live in their own modules) is one more
// StoreTarget in ServerStores and a require in bench/go.mod.
type StoreTarget struct {
	Name string
	// Open returns a fresh store and a function that releases it. An error
	// (the database is not reachable, say) skips the store; the report says so.
	Open func(ctx context.Context) (server.Store, func(), error)
}

// ServerStores returns the stores section 5 measures.
func ServerStores() []StoreTarget {
	return []StoreTarget{
		{Name: "memory (server/memstore)", Open: func(context.Context) (server.Store, func(), error) {
			return memstore.New(), func() {}, nil
		}},
	}
}

// ServerLoadConfig sets up section 5: Workers closed-loop clients POST payments
// for Duration to the demo payments server (server/chaos.Handler, no faults),
// after Warmup of the same load that is not counted. Every row is measured
// Rounds times, interleaved with the others, and the rounds are pooled.
type ServerLoadConfig struct {
	Workers  int
	Duration time.Duration
	Warmup   time.Duration
	Rounds   int
}

// ServerLoadResult is one row of section 5.
type ServerLoadResult struct {
	// Store is the store's name, or "bare handler" for the route without the
	// middleware.
	Store string
	// Case is "no key" (the bare handler), "new key" (every request a new
	// operation: a claim, the handler, a record) or "replay" (every request
	// repeats a finished operation).
	Case       string
	Requests   int
	Errors     int
	Throughput float64 // requests per second
	P50, P99   time.Duration
	// Ratio is Throughput relative to the bare handler's.
	Ratio float64

	lat     []time.Duration
	elapsed time.Duration
}

// ServerLoadReport holds the rows and the stores that could not be measured.
type ServerLoadReport struct {
	Rows    []ServerLoadResult
	Skipped map[string]string // store name -> why
}

// serverRow is one row to measure: a store (nil for the bare handler) and a case.
type serverRow struct {
	store  string
	open   func(ctx context.Context) (server.Store, func(), error)
	path   string
	replay bool
}

// RunServerLoad measures the bare handler, then each store with new keys and
// with replays.
func RunServerLoad(ctx context.Context, cfg ServerLoadConfig, stores []StoreTarget) (ServerLoadReport, error) {
	if cfg.Workers <= 0 || cfg.Duration <= 0 || cfg.Rounds <= 0 || cfg.Warmup < 0 {
		return ServerLoadReport{}, fmt.Errorf("bench: RunServerLoad: Workers, Duration and Rounds must be positive")
	}
	rep := ServerLoadReport{Skipped: map[string]string{}}
	rows := []serverRow{{store: "bare handler", path: "/payments/unprotected", open: func(context.Context) (server.Store, func(), error) {
		return memstore.New(), func() {}, nil // the route does not use it
	}}}
	for _, st := range stores {
		store, release, err := st.Open(ctx) // is it reachable at all?
		if err != nil {
			rep.Skipped[st.Name] = err.Error()
			continue
		}
		_ = store
		release()
		rows = append(rows,
			serverRow{store: st.Name, open: st.Open, path: "/payments"},
			serverRow{store: st.Name, open: st.Open, path: "/payments", replay: true})
	}
	results := make([]ServerLoadResult, len(rows))
	for range cfg.Rounds {
		for i, row := range rows {
			store, release, err := row.open(ctx)
			if err != nil {
				return rep, fmt.Errorf("bench: server load %s: %w", row.store, err)
			}
			lat, nErr, elapsed, err := loadOnce(ctx, cfg, store, row.path, row.replay)
			release()
			if err != nil {
				return rep, fmt.Errorf("bench: server load %s: %w", row.store, err)
			}
			r := &results[i]
			r.lat = append(r.lat, lat...)
			r.Errors += nErr
			r.elapsed += elapsed
		}
	}
	for i, row := range rows {
		r := &results[i]
		r.Store, r.Case = row.store, "new key"
		switch {
		case row.path != "/payments":
			r.Case = "no key"
		case row.replay:
			r.Case = "replay"
		}
		slices.Sort(r.lat)
		r.Requests = len(r.lat)
		r.Throughput = float64(len(r.lat)) / r.elapsed.Seconds()
		r.P50, r.P99 = percentile(r.lat, 0.50), percentile(r.lat, 0.99)
		r.Ratio = r.Throughput / results[0].Throughput
		r.lat = nil
	}
	rep.Rows = results
	return rep, nil
}

// loadOnce serves the payments demo with store and drives path with
// cfg.Workers closed-loop workers, first for cfg.Warmup (not counted), then for
// cfg.Duration. With replay, each worker repeats one key (every request after
// its first is a replay); otherwise every request carries a new key. It
// returns the latencies of the successful requests, the number of failed ones
// and the measured time.
func loadOnce(ctx context.Context, cfg ServerLoadConfig, store server.Store, path string, replay bool) ([]time.Duration, int, time.Duration, error) {
	srv := httptest.NewServer(chaos.Handler(store, payments.NewMemLedger(), nil))
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
		_, err = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		d := time.Since(start)
		if err == nil && resp.StatusCode != http.StatusCreated {
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		return d, err
	}
	keys := make([]string, cfg.Workers)
	for w := range keys {
		keys[w] = "load-" + strconv.FormatInt(seq.Add(1), 10)
	}
	drive := func(d time.Duration) ([]time.Duration, int, time.Duration, error) {
		lat := make([][]time.Duration, cfg.Workers)
		errs := make([]int, cfg.Workers)
		var firstErr error
		var errOnce sync.Once
		var wg sync.WaitGroup
		start := time.Now()
		deadline := start.Add(d)
		for w := range cfg.Workers {
			wg.Go(func() {
				for time.Now().Before(deadline) && ctx.Err() == nil {
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
		elapsed := time.Since(start)
		if err := ctx.Err(); err != nil {
			return nil, 0, 0, err
		}
		all := slices.Concat(lat...)
		nErr := 0
		for _, e := range errs {
			nErr += e
		}
		if len(all) == 0 {
			return nil, 0, 0, fmt.Errorf("no request succeeded: %v", firstErr)
		}
		return all, nErr, elapsed, nil
	}
	// The warm-up opens every worker's connection and, for replays, records
	// each worker's key; it is not counted.
	for w := range keys {
		if _, err := send(keys[w]); err != nil {
			return nil, 0, 0, fmt.Errorf("warm-up: %w", err)
		}
	}
	if cfg.Warmup > 0 {
		if _, _, _, err := drive(cfg.Warmup); err != nil {
			return nil, 0, 0, fmt.Errorf("warm-up: %w", err)
		}
	}
	return drive(cfg.Duration)
}

// percentile returns the q-quantile (nearest rank) of sorted, which must not be empty.
func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
