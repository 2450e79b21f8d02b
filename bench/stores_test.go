package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/demo/payments"
	pgpayments "github.com/idemkit/idem/internal/demo/pgledger"
	"github.com/idemkit/idem/internal/servicetest"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
)

// skipUnreachable skips t because a server is not reachable, or fails it
// when IDEM_REQUIRE_SERVICES=1.
func skipUnreachable(t *testing.T, err error) {
	t.Helper()
	servicetest.Unreachable(t, "%v", err)
}

func TestOpenUnreachable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		open func(ctx context.Context, workers int) (*StoreRig, error)
		want string
	}{
		{"PostgreSQL", func(ctx context.Context, w int) (*StoreRig, error) {
			return openPostgres(ctx, "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2", w)
		}, "cannot reach PostgreSQL at 127.0.0.1:1/test"},
		{"Redis", func(ctx context.Context, w int) (*StoreRig, error) { return openRedis(ctx, "127.0.0.1:1", w) },
			"cannot reach Redis at 127.0.0.1:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rig, err := tt.open(context.Background(), 2)
			if err == nil {
				_ = rig.Close()
				t.Fatal("opened a store on a closed port")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

// The PostgreSQL baseline commits the handler's write with a 2xx, rolls it
// back with a 5xx, and passes the response through; Close drops the tables.
func TestPostgresBaseline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rig, err := openPostgres(ctx, servicetest.PostgresURL(), 2)
	if err != nil {
		skipUnreachable(t, err)
	}
	ledger := rig.Ledger.(*pgpayments.Ledger)
	tests := []struct {
		name   string
		status int
		want   int // payments in the ledger afterwards
	}{
		{"2xx commits", http.StatusCreated, 1},
		{"5xx rolls back", http.StatusInternalServerError, 1},
		{"another 2xx commits", http.StatusOK, 2},
	}
	seq := 0
	h := rig.WrapBaseline(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if pgstore.Tx(r.Context()) == nil {
			t.Error("no transaction in the handler's context")
		}
		seq++
		p := payments.Payment{ID: fmt.Sprintf("p%d", seq), Customer: "c", Amount: 1, Currency: "EUR", Created: time.Now()}
		if err := ledger.Insert(r.Context(), p); err != nil {
			t.Error(err)
		}
		w.Header().Set("X-Status", r.Header.Get("X-Status"))
		var status int
		_, _ = fmt.Sscan(r.Header.Get("X-Status"), &status)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(p.ID))
	}))
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodPost, "/payments", nil)
		r.Header.Set("X-Status", fmt.Sprint(tt.status))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tt.status || w.Header().Get("X-Status") != fmt.Sprint(tt.status) || w.Body.String() != fmt.Sprintf("p%d", seq) {
			t.Errorf("%s: response %d %v %q", tt.name, w.Code, w.Header(), w.Body)
		}
		if n, err := ledger.Count(ctx, ""); err != nil || n != tt.want {
			t.Errorf("%s: %d payments (%v), want %d", tt.name, n, err, tt.want)
		}
	}

	keys := rig.Store.(*pgstore.Store).Table()
	pays := "idem_bench_pay_" + strings.TrimPrefix(keys, "idem_bench_keys_")
	if err := rig.Close(); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, servicetest.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, table := range []string{keys, pays} {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil || exists {
			t.Errorf("table %s still exists after Close (%v)", table, err)
		}
	}
}

// The Redis rig counts two round trips for a first request and one for a
// replay, and Close deletes its keys.
func TestRedisRig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rig, err := openRedis(ctx, servicetest.RedisAddr(), 2)
	if err != nil {
		skipUnreachable(t, err)
	}
	key := "rig-test-" + fmt.Sprint(time.Now().UnixNano())
	run := func(context.Context) (*server.Response, bool) {
		return &server.Response{Status: http.StatusCreated, Body: []byte("ok")}, true
	}
	req := server.Request{Scope: "s", Key: key, Fingerprint: "f", TTL: time.Hour, LockTTL: time.Minute}
	warm := req
	warm.Key += "-warm" // loads the scripts on the server
	tests := []struct {
		name  string
		req   server.Request
		trips int64
	}{
		{"warm-up", warm, -1},
		{"first request", req, 2},
		{"replay", req, 1},
	}
	for _, tt := range tests {
		before := rig.RoundTrips()
		if _, err := rig.Store.Do(ctx, tt.req, run); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := rig.RoundTrips() - before; tt.trips >= 0 && got != tt.trips {
			t.Errorf("%s: %d round trips, want %d", tt.name, got, tt.trips)
		}
	}
	if err := rig.Close(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: servicetest.RedisAddr()})
	defer c.Close()
	for _, k := range []string{key, warm.Key} {
		keys, _, err := c.Scan(ctx, 0, "idembench:*:"+k, 1<<20).Result()
		if err != nil || len(keys) != 0 {
			t.Errorf("after Close: keys %v (%v)", keys, err)
		}
	}
}
