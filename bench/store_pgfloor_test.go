package bench

import (
	"context"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/demo/payments"
	pgpayments "github.com/idemkit/idem/internal/demo/pgledger"
	"github.com/idemkit/idem/internal/testkit/servicetest"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
)

// The floor writes the row the store writes: the store replays a record the
// floor wrote, byte for byte, and so does the floor. The floor commits the
// handler's write with its record, and rolls both back when the response is
// not to be kept, after which the key is new again.
func TestFloorWritesTheStoresRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rig, err := openPostgres(ctx, pgTarget{url: servicetest.PostgresURL(), env: EnvPostgresURL, name: "PostgreSQL", baseline: BaselineOwnTx, floor: true}, 2)
	if err != nil {
		skipUnreachable(t, err)
	}
	defer func() {
		if err := rig.Close(); err != nil {
			t.Error(err)
		}
	}()
	floor := rig.Store.(*floorStore)
	ledger := rig.Ledger.(*pgpayments.Ledger)
	want := &server.Response{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/payments/p1"}, "X-Twice": {"a", "b"}},
		Body:   []byte("{\"id\":\"p1\"}\n\x00\xff"),
	}
	runs := 0
	run := func(status int, keep bool) server.RunFunc {
		return func(ctx context.Context) (*server.Response, bool) {
			runs++
			p := payments.Payment{ID: "p" + string(rune('0'+runs)), Customer: "c", Amount: 1, Currency: "EUR", Created: time.Now()}
			if err := ledger.Insert(ctx, p); err != nil {
				t.Error(err)
			}
			resp := *want
			resp.Status = status
			return &resp, keep
		}
	}
	payments := func() int {
		t.Helper()
		n, err := ledger.Count(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	req := server.Request{Scope: "tenant", Key: "k1", Fingerprint: "fp", TTL: time.Hour, LockTTL: time.Minute}

	// A response not kept: the payment is rolled back, nothing recorded.
	res, err := floor.Do(ctx, req, run(http.StatusServiceUnavailable, false))
	if err != nil || res.Outcome != server.OutcomeExecuted || res.Response.Status != http.StatusServiceUnavailable {
		t.Fatalf("not kept: %+v, %v", res, err)
	}
	if n := payments(); n != 0 {
		t.Fatalf("%d payments after a response not kept, want 0", n)
	}
	// The key is still new: it runs, and its payment and record commit.
	if res, err := floor.Do(ctx, req, run(http.StatusCreated, true)); err != nil || res.Outcome != server.OutcomeExecuted {
		t.Fatalf("new key: %+v, %v", res, err)
	}
	if n := payments(); n != 1 || runs != 2 {
		t.Fatalf("%d payments in %d runs, want 1 in 2", n, runs)
	}
	store := pgstore.New(floor.pool, pgstore.WithTable(floor.table))
	for name, s := range map[string]server.Store{"the store": store, "the floor": floor} {
		res, err := s.Do(ctx, req, func(context.Context) (*server.Response, bool) {
			t.Errorf("%s ran the handler of a recorded key", name)
			return want, true
		})
		if err != nil || res.Outcome != server.OutcomeReplayed || !reflect.DeepEqual(res.Response, want) {
			t.Errorf("%s: %+v (%+v), %v; want the record replayed: %+v", name, res, res.Response, err, want)
		}
	}
	if n := payments(); n != 1 {
		t.Errorf("%d payments after the replays, want 1", n)
	}
}
