package pgstore_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
)

// ownTx is the baseline: the same payments handler, in a transaction of its own
// (BEGIN, INSERT, COMMIT), without idem.
func ownTx(pool *pgxpool.Pool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, err := pool.Begin(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r.WithContext(pgstore.ContextWithTx(r.Context(), tx)))
		if rec.Code >= 500 {
			_ = tx.Rollback(context.Background())
		} else if err := tx.Commit(context.Background()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// latencies collects request durations of one kind.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d...)
	l.mu.Unlock()
}

func (l *latencies) stats() (mean, p50, p99 time.Duration) {
	s := slices.Clone(l.d)
	if len(s) == 0 {
		return 0, 0, 0
	}
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return sum / time.Duration(len(s)), s[len(s)/2], s[(len(s)*99)/100]
}

// benchPayments interleaves, in the same run and on the same database, POST
// /payments through the pgstore middleware and through the own-transaction
// baseline, one of each per iteration (per goroutine when parallel), and reports:
//
//	idem-req/s, bare-req/s  per-request throughput (1/mean latency, per worker)
//	throughput-ratio        idem / bare: the share of the bare handler's throughput kept
//	p50-added-µs, p99-added-µs  latency idem adds at the median and the 99th percentile
//
// Requests are served in-process (ServeHTTP on a recorder), so the ratio holds
// the database work only, not HTTP.
func benchPayments(b *testing.B, parallel bool) {
	e := newEnv(b)
	withIdem := server.Middleware(e.store)(http.HandlerFunc(e.ledger.create))
	bare := ownTx(e.pool, http.HandlerFunc(e.ledger.create))
	var seq atomic.Int64
	body := `{"customer":"bench","amount":1250,"currency":"EUR"}`
	do := func(h http.Handler, key bool) time.Duration {
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
		if key {
			r.Header.Set("Idempotency-Key", "bench-"+strconv.FormatInt(seq.Add(1), 10))
		}
		w := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(w, r)
		d := time.Since(start)
		if w.Code != http.StatusCreated {
			panic(fmt.Sprintf("status %d: %s", w.Code, w.Body))
		}
		return d
	}
	// Warm the pool's connections and statement caches.
	for range 20 {
		do(withIdem, true)
		do(bare, false)
	}
	var idemLat, bareLat latencies
	b.ResetTimer()
	if parallel {
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			var mine, base []time.Duration
			for pb.Next() {
				mine = append(mine, do(withIdem, true))
				base = append(base, do(bare, false))
			}
			idemLat.add(mine)
			bareLat.add(base)
		})
	} else {
		mine, base := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
		for b.Loop() {
			mine = append(mine, do(withIdem, true))
			base = append(base, do(bare, false))
		}
		idemLat.add(mine)
		bareLat.add(base)
	}
	b.StopTimer()
	im, i50, i99 := idemLat.stats()
	bm, b50, b99 := bareLat.stats()
	b.ReportMetric(float64(time.Second)/float64(im), "idem-req/s")
	b.ReportMetric(float64(time.Second)/float64(bm), "bare-req/s")
	b.ReportMetric(float64(bm)/float64(im), "throughput-ratio")
	b.ReportMetric(float64(i50-b50)/float64(time.Microsecond), "p50-added-µs")
	b.ReportMetric(float64(i99-b99)/float64(time.Microsecond), "p99-added-µs")
}

func BenchmarkPaymentsSequential(b *testing.B) { benchPayments(b, false) }

func BenchmarkPaymentsParallel(b *testing.B) { benchPayments(b, true) }

// BenchmarkRequestCosts serves POST /payments in-process, one case per
// sub-benchmark: the own-transaction baseline (bare), a new key and a replay
// through the store, with allocations per request and this process's CPU
// time per request (cpu-µs/op: PostgreSQL's is not in it). Its times include
// PostgreSQL's commit; its allocations are this process's alone, and
// repeatable.
func BenchmarkRequestCosts(b *testing.B) {
	e := newEnv(b)
	withIdem := server.Middleware(e.store)(http.HandlerFunc(e.ledger.create))
	bare := ownTx(e.pool, http.HandlerFunc(e.ledger.create))
	var seq atomic.Int64
	do := func(b *testing.B, h http.Handler, key string) {
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"customer":"bench","amount":1250,"currency":"EUR"}`))
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	newKey := func() string { return "cost-" + strconv.FormatInt(seq.Add(1), 10) }
	for range 20 { // the pool's connections and statement caches
		do(b, withIdem, newKey())
		do(b, bare, "")
	}
	do(b, withIdem, "replayed")
	for _, c := range []struct {
		name string
		h    http.Handler
		key  func() string
	}{
		{"bare", bare, func() string { return "" }},
		{"new_key", withIdem, newKey},
		{"replay", withIdem, func() string { return "replayed" }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				do(b, c.h, c.key())
			}
			b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
