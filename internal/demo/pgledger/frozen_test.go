package pgledger_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/demo/payments"
	"github.com/idemkit/idem/internal/demo/pgledger"
	"github.com/idemkit/idem/internal/testkit/servicetest"
	"github.com/idemkit/idem/internal/testkit/tcpproxy"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
)

// frozenDeadline is the request's deadline in the frozen-PostgreSQL tests:
// far below the store's finish time-out (5 s), which bounded the record and
// the rollback alone.
const frozenDeadline = time.Second

// frozenSlack is how much later than its deadline a request may be answered:
// the answer's own work after the store gave up.
const frozenSlack = 500 * time.Millisecond

// TestFrozenPostgresAnswersWithinTheDeadline (issue 27, item 6): PostgreSQL
// stops answering after the claim (a proxy that keeps the connections up and
// passes nothing: a frozen server, a partition), with the business write made
// and the record to come. The request is answered within its deadline, with
// outcome-unknown (the store cannot know whether the record landed); the
// frozen transaction never commits, so once PostgreSQL has ended it (its idle
// timeout) the retry runs and the ledger holds one payment, never two.
func TestFrozenPostgresAnswersWithinTheDeadline(t *testing.T) {
	t.Parallel()
	f := newFrozen(t)
	f.api.AfterWrite = func(*http.Request) { f.proxy.Cut() } // the write made, the record next
	start := time.Now()
	w := f.post(t, "frozen-after-write")
	took := time.Since(start)
	if took > frozenDeadline+frozenSlack {
		t.Fatalf("answered %d after %v; want an answer within the request's deadline (%v)", w.Code, took.Round(time.Millisecond), frozenDeadline)
	}
	if w.Code != http.StatusInternalServerError || problemOf(w) != server.ProblemOutcomeUnknown {
		t.Fatalf("answered %d %s; want 500 outcome-unknown: the record may or may not have landed", w.Code, w.Body)
	}
	f.retryPaysOnce(t, "frozen-after-write")
}

// TestFrozenPostgresBeforeTheRunAnswers503: PostgreSQL frozen before the
// claim answers 503 within the request's deadline, and nothing ran.
func TestFrozenPostgresBeforeTheRunAnswers503(t *testing.T) {
	t.Parallel()
	f := newFrozen(t)
	ran := false
	f.api.BeforeWrite = func(*http.Request) error { ran = true; return nil }
	f.proxy.Cut()
	start := time.Now()
	w := f.post(t, "frozen-before")
	took := time.Since(start)
	if took > frozenDeadline+frozenSlack || w.Code != http.StatusServiceUnavailable || ran {
		t.Fatalf("answered %d after %v (ran: %v); want 503 within %v, the handler not run", w.Code, took.Round(time.Millisecond), ran, frozenDeadline)
	}
	f.retryPaysOnce(t, "frozen-before")
}

// frozen is a store and a ledger on a pool that reaches PostgreSQL through a
// proxy the test can cut, served by the payments API behind the middleware.
type frozen struct {
	proxy   *tcpproxy.Proxy
	store   *pgstore.Store
	ledger  *pgledger.Ledger
	api     *payments.API
	handler http.Handler
	direct  *pgxpool.Pool // the test's own pool, not through the proxy
	table   string        // the ledger's
	keys    string        // the store's
}

func newFrozen(t *testing.T) *frozen {
	t.Helper()
	direct := testPool(t, 4)
	u, err := url.Parse(servicetest.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	first := servicetest.Port(7120)
	for port := first; port < first+4 && ln == nil; port++ {
		ln, _ = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	if ln == nil {
		t.Fatalf("no free port in 127.0.0.1:%d-%d", first, first+3)
	}
	proxy := tcpproxy.Start(t, ln, u.Host)
	u.Host = proxy.Addr
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgstore.NewPool(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	t.Cleanup(proxy.Close) // first: a pool closes at once once its connections have ended
	f := &frozen{proxy: proxy, direct: direct, table: testTable(t, direct, "pay_frozen"), keys: testTable(t, direct, "idem_frozen")}
	// PostgreSQL ends the frozen claim's transaction after 2 s idle: the
	// retry waits that long for the key, not the default minute.
	f.store = pgstore.New(pool, pgstore.WithTable(f.keys), pgstore.WithIdleInTxTimeout(2*time.Second))
	if f.ledger, err = pgledger.New(pool, f.table); err != nil {
		t.Fatal(err)
	}
	if err := f.store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.ledger.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	f.api = &payments.API{Ledger: f.ledger}
	f.handler = server.Middleware(f.store)(http.HandlerFunc(f.api.Create))
	return f
}

// post sends a payment with key, its context ending at frozenDeadline, as
// the middleware's per-request deadline ends it.
func (f *frozen) post(t *testing.T, key string) *httptest.ResponseRecorder {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), frozenDeadline)
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/payments", strings.NewReader(`{"customer":"frozen","amount":100,"currency":"EUR"}`))
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	f.handler.ServeHTTP(w, r)
	return w
}

// retryPaysOnce retries key through a store on the test's own pool (the
// process restarted, PostgreSQL reachable) until it is answered, and checks
// that the ledger holds exactly one payment: the frozen transaction, which
// PostgreSQL ends, never commits its write.
func (f *frozen) retryPaysOnce(t *testing.T, key string) {
	t.Helper()
	store := pgstore.New(f.direct, pgstore.WithTable(f.keys))
	ledger, err := pgledger.New(f.direct, f.table)
	if err != nil {
		t.Fatal(err)
	}
	h := server.Middleware(store)(http.HandlerFunc((&payments.API{Ledger: ledger}).Create))
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"customer":"frozen","amount":100,"currency":"EUR"}`))
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r) // waits for the key (5 s) while the frozen claim holds it
		if w.Code == http.StatusCreated {
			break
		}
		if w.Code != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("retry: %d %s; want 201 once PostgreSQL ended the frozen claim", w.Code, w.Body)
		}
	}
	got, err := ledger.List(context.Background(), "frozen")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d payments after the retry; want exactly 1", len(got))
	}
}

// problemOf is the type of a problem+json answer.
func problemOf(w *httptest.ResponseRecorder) string {
	var p struct{ Type string }
	_ = json.Unmarshal(w.Body.Bytes(), &p)
	return p.Type
}
