package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/demo/payments"
	pgpayments "github.com/idemkit/idem/internal/demo/pgledger"
	"github.com/idemkit/idem/internal/testkit/servicetest"
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
			return openPostgres(ctx, pgTarget{url: "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2",
				env: EnvPostgresURL, name: "PostgreSQL", baseline: BaselineOwnTx}, w)
		}, "cannot reach PostgreSQL at 127.0.0.1:1/test (set IDEM_POSTGRES_URL)"},
		{"PgBouncer", func(ctx context.Context, w int) (*StoreRig, error) {
			return openPostgres(ctx, pgTarget{url: "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2",
				env: EnvPgBouncerURL, name: "PgBouncer", baseline: BaselineOwnTxPgBouncer}, w)
		}, "cannot reach PgBouncer at 127.0.0.1:1/test (set IDEM_PGBOUNCER_URL)"},
		{"Redis", func(ctx context.Context, w int) (*StoreRig, error) { return openRedis(ctx, "127.0.0.1:1", w) },
			"cannot reach Redis at 127.0.0.1:1"},
		{"Redis Cluster", func(ctx context.Context, w int) (*StoreRig, error) {
			return openRedisCluster(ctx, []string{"127.0.0.1:1", "127.0.0.1:2"}, w)
		}, "cannot reach the Redis Cluster at 127.0.0.1:1,127.0.0.1:2 (set IDEM_REDIS_CLUSTER_ADDRS)"},
		{"Redis Sentinel", func(ctx context.Context, w int) (*StoreRig, error) {
			return openRedisSentinel(ctx, []string{"127.0.0.1:1"}, "m", w)
		}, `cannot reach the Redis master "m" through the sentinels at 127.0.0.1:1`},
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
// Directly, and through PgBouncer when IDEM_PGBOUNCER_URL is set.
func TestPostgresBaseline(t *testing.T) {
	t.Parallel()
	t.Run("direct", func(t *testing.T) {
		t.Parallel()
		testPostgresBaseline(t, pgTarget{url: servicetest.PostgresURL(), env: EnvPostgresURL, name: "PostgreSQL", baseline: BaselineOwnTx})
	})
	t.Run("PgBouncer", func(t *testing.T) {
		url := servicetest.Optional(t, EnvPgBouncerURL, howToPgBouncer)
		t.Parallel()
		testPostgresBaseline(t, pgTarget{url: url[0], env: EnvPgBouncerURL, name: "PgBouncer", baseline: BaselineOwnTxPgBouncer})
	})
}

func testPostgresBaseline(t *testing.T, target pgTarget) {
	ctx := context.Background()
	rig, err := openPostgres(ctx, target, 2)
	if err != nil {
		skipUnreachable(t, err)
	}
	if rig.Baseline != target.baseline {
		t.Errorf("baseline %q, want %q", rig.Baseline, target.baseline)
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
	conn, err := pgx.Connect(ctx, target.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, table := range []string{keys, pays} {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.QueryExecModeSimpleProtocol, table).Scan(&exists); err != nil || exists {
			t.Errorf("table %s still exists after Close (%v)", table, err)
		}
	}
}

// The Redis rigs count two round trips for a first request and one for a
// replay (on Sentinel with WAIT 1, the WAITs add theirs), and Close deletes
// their keys, on every master of a Cluster.
func TestRedisRig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// open opens the rig and a client of the same servers, or skips t
		// when its topology is not set.
		open          func(t *testing.T) (*StoreRig, redis.UniversalClient, error)
		first, replay int64 // round trips
	}{
		{"single", func(*testing.T) (*StoreRig, redis.UniversalClient, error) {
			addr := servicetest.RedisAddr()
			rig, err := openRedis(context.Background(), addr, 2)
			return rig, redis.NewClient(&redis.Options{Addr: addr}), err
		}, 2, 1},
		{"Cluster", func(t *testing.T) (*StoreRig, redis.UniversalClient, error) {
			addrs := servicetest.Optional(t, EnvRedisClusterAddrs, howToRedisTopologies)
			rig, err := openRedisCluster(context.Background(), addrs, 2)
			return rig, redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs}), err
		}, 2, 1},
		{"Sentinel WAIT 1", func(t *testing.T) (*StoreRig, redis.UniversalClient, error) {
			addrs := servicetest.Optional(t, EnvRedisSentinelAddrs, howToRedisTopologies)
			master := servicetest.Optional(t, EnvRedisMasterName, howToRedisTopologies)
			rig, err := openRedisSentinel(context.Background(), addrs, master[0], 2)
			return rig, redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master[0], SentinelAddrs: addrs}), err
		}, 4, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rig, client, err := tt.open(t)
			defer client.Close()
			if err != nil {
				skipUnreachable(t, err)
			}
			testRedisRig(t, rig, client, tt.first, tt.replay)
		})
	}
}

// testRedisRig checks rig's round trips and that Close deletes its keys,
// which client sees.
func testRedisRig(t *testing.T, rig *StoreRig, client redis.UniversalClient, first, replay int64) {
	ctx := context.Background()
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
		{"first request", req, first},
		{"replay", req, replay},
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
	var (
		mu   sync.Mutex // forEachMaster runs in parallel on a Cluster
		left []string
	)
	count := func() {
		left = nil
		err := forEachMaster(ctx, client, func(ctx context.Context, node *redis.Client) error {
			keys, _, err := node.Scan(ctx, 0, "idembench:*:*"+key+"*", 1<<20).Result()
			mu.Lock()
			defer mu.Unlock()
			left = append(left, keys...)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if count(); len(left) == 0 {
		t.Fatal("no keys written")
	}
	if err := rig.Close(); err != nil {
		t.Fatal(err)
	}
	if count(); len(left) != 0 {
		t.Errorf("after Close: keys %v", left)
	}
}

// A topology whose variable is unset is not measured: its Open fails with
// ErrNotSet, naming the variable and how to set it.
func TestTopologyNotSet(t *testing.T) {
	for _, st := range ServerStores() {
		if len(st.Env) == 0 {
			continue
		}
		t.Run(st.Name, func(t *testing.T) {
			for _, env := range st.Env {
				t.Setenv(env, "")
			}
			rig, err := st.Open(context.Background(), 2)
			if err == nil {
				_ = rig.Close()
				t.Fatal("opened with its variables unset")
			}
			if !errors.Is(err, ErrNotSet) || !strings.Contains(err.Error(), st.Env[0]) || !strings.Contains(err.Error(), ".ci/") {
				t.Errorf("error %q: want ErrNotSet, naming %s and how to set it", err, st.Env[0])
			}
		})
	}
}
