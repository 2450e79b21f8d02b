package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/server/pgstore"
)

// unreachablePool is a pool of maxConns connections on a port nothing listens
// on; pgxpool connects lazily.
func unreachablePool(t *testing.T, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// requirePanic fails t unless f panics with exactly want.
func requirePanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		if got := recover(); got != want {
			t.Fatalf("panic = %#v; want %q", got, want)
		}
	}()
	f()
}

// TestOptionsPanicWhenMade: an impossible value panics when the option is
// made, naming the option and what it wants, before any New.
func TestOptionsPanicWhenMade(t *testing.T) {
	t.Parallel()
	const wantTable = "want a lower-case SQL identifier of at most 48 characters, optionally schema-qualified"
	tests := []struct {
		name string
		make func() pgstore.Option
		want string
	}{
		{"empty table", func() pgstore.Option { return pgstore.WithTable("") }, `pgstore: WithTable(""): ` + wantTable},
		{"upper case", func() pgstore.Option { return pgstore.WithTable("Idem") }, `pgstore: WithTable("Idem"): ` + wantTable},
		{"hyphen", func() pgstore.Option { return pgstore.WithTable("idem-keys") }, `pgstore: WithTable("idem-keys"): ` + wantTable},
		{"injection", func() pgstore.Option { return pgstore.WithTable(`k"; DROP TABLE x; --`) }, `pgstore: WithTable("k\"; DROP TABLE x; --"): ` + wantTable},
		{"leading digit", func() pgstore.Option { return pgstore.WithTable("1keys") }, `pgstore: WithTable("1keys"): ` + wantTable},
		{"two dots", func() pgstore.Option { return pgstore.WithTable("a.b.c") }, `pgstore: WithTable("a.b.c"): ` + wantTable},
		{"space", func() pgstore.Option { return pgstore.WithTable("idem keys") }, `pgstore: WithTable("idem keys"): ` + wantTable},
		{"too long", func() pgstore.Option { return pgstore.WithTable(strings.Repeat("k", 49)) }, `pgstore: WithTable("` + strings.Repeat("k", 49) + `"): ` + wantTable},
		{"lock timeout zero", func() pgstore.Option { return pgstore.WithLockTimeout(0) }, "pgstore: WithLockTimeout(0s): want 1ms <= d <= 1h"},
		{"lock timeout below 1ms", func() pgstore.Option { return pgstore.WithLockTimeout(time.Microsecond) }, "pgstore: WithLockTimeout(1µs): want 1ms <= d <= 1h"},
		{"lock timeout above 1h", func() pgstore.Option { return pgstore.WithLockTimeout(time.Hour + 1) }, "pgstore: WithLockTimeout(1h0m0.000000001s): want 1ms <= d <= 1h"},
		{"finish timeout zero", func() pgstore.Option { return pgstore.WithFinishTimeout(0) }, "pgstore: WithFinishTimeout(0s): want a positive duration"},
		{"idle-in-transaction timeout negative", func() pgstore.Option { return pgstore.WithIdleInTxTimeout(-time.Second) }, "pgstore: WithIdleInTxTimeout(-1s): want a duration >= 0"},
		{"statement timeout negative", func() pgstore.Option { return pgstore.WithStatementTimeout(-time.Second) }, "pgstore: WithStatementTimeout(-1s): want a duration >= 0"},
		{"finish timeout negative", func() pgstore.Option { return pgstore.WithFinishTimeout(-time.Second) }, "pgstore: WithFinishTimeout(-1s): want a positive duration"},
		{"acquire timeout zero", func() pgstore.Option { return pgstore.WithAcquireTimeout(0) }, "pgstore: WithAcquireTimeout(0s): want a positive duration"},
		{"acquire timeout negative", func() pgstore.Option { return pgstore.WithAcquireTimeout(-time.Second) }, "pgstore: WithAcquireTimeout(-1s): want a positive duration"},
		{"reserve negative", func() pgstore.Option { return pgstore.WithReservedConns(-1) }, "pgstore: WithReservedConns(-1): want n >= 0"},
		{"scope entries zero", func() pgstore.Option { return pgstore.WithScopeLimits(0, 1) }, "pgstore: WithScopeLimits(0, 1): want both at least 1"},
		{"scope bytes zero", func() pgstore.Option { return pgstore.WithScopeLimits(1, 0) }, "pgstore: WithScopeLimits(1, 0): want both at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requirePanic(t, tt.want, func() { tt.make() })
		})
	}
}

// TestOptionsValidValues: the boundary values build and New accepts them.
func TestOptionsValidValues(t *testing.T) {
	t.Parallel()
	pool := unreachablePool(t, 4)
	tests := []struct {
		name      string
		opt       pgstore.Option
		wantTable string
	}{
		{"default-like table", pgstore.WithTable("idem_keys"), "idem_keys"},
		{"schema-qualified table", pgstore.WithTable("idem.keys_2"), "idem.keys_2"},
		{"longest table", pgstore.WithTable(strings.Repeat("k", 48)), strings.Repeat("k", 48)},
		{"lock timeout 1ms", pgstore.WithLockTimeout(time.Millisecond), pgstore.DefaultTable},
		{"lock timeout 1h", pgstore.WithLockTimeout(time.Hour), pgstore.DefaultTable},
		{"finish timeout 1ns", pgstore.WithFinishTimeout(time.Nanosecond), pgstore.DefaultTable},
		{"acquire timeout 1ns", pgstore.WithAcquireTimeout(time.Nanosecond), pgstore.DefaultTable},
		{"reserve all but one", pgstore.WithReservedConns(3), pgstore.DefaultTable},
		{"no reserve", pgstore.WithReservedConns(0), pgstore.DefaultTable},
		{"smallest scope share", pgstore.WithScopeLimits(1, 1), pgstore.DefaultTable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := pgstore.New(pool, tt.opt).Table(); got != tt.wantTable {
				t.Fatalf("Table() = %q; want %q", got, tt.wantTable)
			}
		})
	}
	if got := pgstore.New(pool).Table(); got != pgstore.DefaultTable {
		t.Fatalf("default table %q; want %q", got, pgstore.DefaultTable)
	}
}

// TestNewPanics: what only New can judge, the pool and the options together.
func TestNewPanics(t *testing.T) {
	t.Parallel()
	pool := unreachablePool(t, 4)
	requirePanic(t, "pgstore: New(nil): want a *pgxpool.Pool", func() { pgstore.New(nil) })
	requirePanic(t, "pgstore: New(nil Option): want an Option", func() { pgstore.New(pool, pgstore.WithTable("k"), nil) })
	requirePanic(t, "pgstore: WithReservedConns(4): want fewer than the pool's MaxConns (4)",
		func() { pgstore.New(pool, pgstore.WithReservedConns(4)) })
	requirePanic(t, "pgstore: WithReservedConns(1): want fewer than the pool's MaxConns (1)",
		func() { pgstore.New(unreachablePool(t, 1), pgstore.WithReservedConns(1)) })
	pgstore.New(unreachablePool(t, 1)) // the default reserve of a one-connection pool is 0
}
