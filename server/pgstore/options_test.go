package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/server/pgstore"
)

// unreachablePool is a pool on a port nothing listens on; pgxpool connects lazily.
func unreachablePool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	pool := unreachablePool(t)
	tests := []struct {
		name    string
		opt     pgstore.Option
		wantErr string // the option the error must name; "" for valid
	}{
		{"default-like table", pgstore.WithTable("idem_keys"), ""},
		{"schema-qualified table", pgstore.WithTable("idem.keys_2"), ""},
		{"empty table", pgstore.WithTable(""), "WithTable"},
		{"upper case", pgstore.WithTable("Idem"), "WithTable"},
		{"hyphen", pgstore.WithTable("idem-keys"), "WithTable"},
		{"injection", pgstore.WithTable(`k"; DROP TABLE x; --`), "WithTable"},
		{"leading digit", pgstore.WithTable("1keys"), "WithTable"},
		{"two dots", pgstore.WithTable("a.b.c"), "WithTable"},
		{"space", pgstore.WithTable("idem keys"), "WithTable"},
		{"too long", pgstore.WithTable(strings.Repeat("k", 49)), "WithTable"},
		{"longest", pgstore.WithTable(strings.Repeat("k", 48)), ""},
		{"lock timeout zero", pgstore.WithLockTimeout(0), "WithLockTimeout"},
		{"lock timeout below 1ms", pgstore.WithLockTimeout(time.Microsecond), "WithLockTimeout"},
		{"lock timeout above 1h", pgstore.WithLockTimeout(2 * time.Hour), "WithLockTimeout"},
		{"lock timeout 1ms", pgstore.WithLockTimeout(time.Millisecond), ""},
		{"finish timeout zero", pgstore.WithFinishTimeout(0), "WithFinishTimeout"},
		{"finish timeout 1s", pgstore.WithFinishTimeout(time.Second), ""},
		{"acquire timeout zero", pgstore.WithAcquireTimeout(0), "WithAcquireTimeout"},
		{"acquire timeout negative", pgstore.WithAcquireTimeout(-time.Second), "WithAcquireTimeout"},
		{"acquire timeout 50ms", pgstore.WithAcquireTimeout(50 * time.Millisecond), ""},
		{"reserve negative", pgstore.WithReservedConns(-1), "WithReservedConns"},
		{"reserve the whole pool (4)", pgstore.WithReservedConns(4), "WithReservedConns"},
		{"reserve all but one", pgstore.WithReservedConns(3), ""},
		{"no reserve", pgstore.WithReservedConns(0), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := pgstore.New(pool, tt.opt)
			if tt.wantErr == "" {
				if err != nil || s == nil {
					t.Fatalf("New = %v, %v; want a store", s, err)
				}
				return
			}
			if !errors.Is(err, pgstore.ErrInvalidOption) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New = %v; want ErrInvalidOption naming %s", err, tt.wantErr)
			}
		})
	}
	if _, err := pgstore.New(nil); !errors.Is(err, pgstore.ErrInvalidOption) {
		t.Fatalf("New(nil) = %v; want ErrInvalidOption", err)
	}
	if s, _ := pgstore.New(pool); s.Table() != pgstore.DefaultTable {
		t.Fatalf("default table %q; want %q", s.Table(), pgstore.DefaultTable)
	}
}
