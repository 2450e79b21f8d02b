package pgstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/server/pgstore/internal/pgtest"
)

// BenchmarkQueryExecModes measures what PgBouncer's query mode would cost on a
// direct connection: Do (claim, one payment, record) on pools that differ only
// in their query mode, interleaved in one run, reported as each mode's time over
// the statement cache's (pgx's default, which ConfigurePool keeps directly).
func BenchmarkQueryExecModes(b *testing.B) {
	modes := []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeExec}
	envs := make([]env, len(modes))
	base := pgtest.Pool(b, 4)
	table, lt := pgtest.Table(b, base, "idem_mode"), pgtest.Table(b, base, "pay_mode")
	for i, m := range modes {
		cfg, _ := pgxpool.ParseConfig(pgtest.URL())
		cfg.ConnConfig.DefaultQueryExecMode = m
		cfg.MaxConns = 4
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		envs[i] = newEnvOn(b, pool, table, lt)
	}
	calls := 0
	dur := make([]time.Duration, len(modes))
	n := 0
	for b.Loop() {
		n++
		for i, e := range envs {
			start := time.Now()
			_, err := e.store.Do(context.Background(), req("k"+strconv.Itoa(n)+"-"+strconv.Itoa(i), "fp"), payRun(b, e, &calls, true))
			dur[i] += time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	for i, m := range modes {
		if i > 0 {
			b.ReportMetric(float64(dur[i])/float64(dur[0]), strings.ReplaceAll(m.String(), " ", "_")+"/cache_statement")
		}
	}
}
