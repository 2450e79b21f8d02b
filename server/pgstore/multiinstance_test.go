package pgstore_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore/internal/pgtest"
)

// instance is one server process: its own pool, store, middleware and listener,
// sharing the database (and the tables) with the other instances.
func newInstance(t *testing.T, tp pgtest.Topology, table, ledgerTable string) (*httptest.Server, env) {
	t.Helper()
	e := newEnvOn(t, tp.Pool(t, 16), table, ledgerTable)
	mux := http.NewServeMux()
	mux.Handle("POST /payments", server.Middleware(e.store)(http.HandlerFunc(e.ledger.create)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, e
}

func TestTwoInstancesConcurrentDuplicatesPayOnce(t *testing.T) {
	t.Parallel()
	eachTopology(t, twoInstancesConcurrentDuplicatesPayOnce)
}

func twoInstancesConcurrentDuplicatesPayOnce(t *testing.T, tp pgtest.Topology) {
	pool := tp.Pool(t, 2)
	table, ledgerTable := pgtest.Table(t, pool, "idem_test"), pgtest.Table(t, pool, "pay_test")
	a, e := newInstance(t, tp, table, ledgerTable)
	b, _ := newInstance(t, tp, table, ledgerTable)

	post := func(url, key, body string) (int, string, error) {
		req, err := http.NewRequest(http.MethodPost, url+"/payments", strings.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(got) + "|" + resp.Header.Get("Location"), err
	}

	const rounds, perRound = 5, 12
	for round := range rounds {
		key := fmt.Sprintf("multi-%d", round)
		body := fmt.Sprintf(`{"customer":"c-%d","amount":%d,"currency":"EUR"}`, round, 100+round)
		start := make(chan struct{})
		var wg sync.WaitGroup
		statuses := make([]int, perRound)
		bodies := make([]string, perRound)
		errs := make([]error, perRound)
		for i := range perRound {
			url := a.URL
			if i%2 == 1 {
				url = b.URL
			}
			wg.Go(func() {
				<-start
				statuses[i], bodies[i], errs[i] = post(url, key, body)
			})
		}
		close(start)
		wg.Wait()
		var paid string
		for i := range perRound {
			if errs[i] != nil {
				t.Fatalf("round %d request %d: %v", round, i, errs[i])
			}
			switch statuses[i] {
			case http.StatusCreated:
				if paid == "" {
					paid = bodies[i]
				} else if bodies[i] != paid {
					t.Fatalf("round %d: two different payments answered:\n%s\n%s", round, paid, bodies[i])
				}
			case http.StatusConflict: // in progress beyond the lock timeout
			default:
				t.Fatalf("round %d request %d: status %d %s", round, i, statuses[i], bodies[i])
			}
		}
		if paid == "" {
			t.Fatalf("round %d: no request got the payment", round)
		}
		if n, err := e.ledger.count(context.Background(), fmt.Sprintf("c-%d", round)); err != nil || n != 1 {
			t.Fatalf("round %d: %d payments (%v); want exactly 1", round, n, err)
		}
	}
	if n := e.count(t); n != rounds {
		t.Fatalf("%d payments in all; want %d", n, rounds)
	}
}
