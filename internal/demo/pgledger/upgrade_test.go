package pgledger_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/demo/payments"
	"github.com/idemkit/idem/internal/demo/pgledger"
	"github.com/idemkit/idem/internal/testkit/servicetest"
	"github.com/idemkit/idem/internal/testkit/syncbuf"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/pgstore"
)

// previousVersion is the commit whose pgstore the rolling-upgrade test runs
// beside this tree's: the last one before pgstore's schema or protocol changed
// (issue 30: the record's CHECK constraint dropped, the claim's timeouts set
// in the lock's statement). A change to the table or to how claims lock moves
// it to the last commit before that change.
const previousVersion = "72c94db9cca3e3a4386d2ac49be13f21ae73586c"

// The tables idem-server's demo uses, in the connection's search_path.
const (
	upgradeKeys     = "idem_demo_keys"
	upgradePayments = "idem_demo_payments"
)

// TestRollingUpgradeFromThePreviousVersion serves one table from the previous
// version's idem-server (built from git) and from this tree's store at once,
// as a rolling upgrade does: this version's Migrate starts beside a claim of
// the old one in progress and does not wait for it; duplicates of one key sent
// to both versions at once pay once and answer one payment; each version
// replays what the other recorded; an effect mark of this version whose
// owner is gone (server.BeginEffect, then a crash) is outcome-unknown here and
// in progress there, never run again; and once the old instance has stopped,
// Migrate drops the CHECK constraint the old one created.
func TestRollingUpgradeFromThePreviousVersion(t *testing.T) {
	t.Parallel()
	schemaURL, pool := upgradeSchema(t)
	old := startPrevious(t, schemaURL)
	ctx := context.Background()

	first := post(t, old.url, "before-upgrade", `{"customer":"c0","amount":100,"currency":"EUR"}`, nil)
	if first.status != http.StatusCreated {
		t.Fatalf("old version, first key: %d %s", first.status, first.body)
	}
	if !hasStateCheck(t, pool) {
		t.Fatal("the old version's table has no CHECK constraint on state; previousVersion is not the version before the change")
	}

	// A slow request on the old version holds its claim while the new
	// version starts.
	slow := make(chan answer, 1)
	go func() {
		slow <- post(t, old.url, "slow-on-old", `{"customer":"c1","amount":101,"currency":"EUR"}`,
			http.Header{"Chaos-Delay-After-Write": {"3s"}})
	}()
	waitForClaims(t, pool, 1)
	store := pgstore.New(pool, pgstore.WithTable(upgradeKeys), pgstore.WithLockTimeout(5*time.Second))
	ledger, err := pgledger.New(pool, upgradePayments)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("new version's Migrate beside the old one's claim: %v", err)
	}
	if err := ledger.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-slow:
		t.Fatalf("the old claim ended (%d) before the new Migrate returned: Migrate waited for it", a.status)
	default:
	}
	if !hasStateCheck(t, pool) {
		t.Fatal("Migrate dropped the CHECK constraint while a claim held the table")
	}
	api := &payments.API{Ledger: ledger, Owner: server.BearerScope}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", server.Middleware(store, server.WithScope(server.BearerScope))(crashAfterMark(t, http.HandlerFunc(api.Create))))
	cur := httptest.NewServer(mux)
	t.Cleanup(cur.Close)

	// Each version replays what the other recorded.
	if a := post(t, cur.URL, "before-upgrade", `{"customer":"c0","amount":100,"currency":"EUR"}`, nil); a.status != http.StatusCreated || a.body != first.body || a.replayed != "true" {
		t.Fatalf("new version replaying the old one's record: %d %q %q; want 201, replayed, %q", a.status, a.replayed, a.body, first.body)
	}
	byNew := post(t, cur.URL, "recorded-by-new", `{"customer":"c2","amount":102,"currency":"EUR"}`, nil)
	if a := post(t, old.url, "recorded-by-new", `{"customer":"c2","amount":102,"currency":"EUR"}`, nil); byNew.status != http.StatusCreated || a.status != http.StatusCreated || a.body != byNew.body || a.replayed != "true" {
		t.Fatalf("old version replaying the new one's record: %d %q %q; want 201, replayed, %q", a.status, a.replayed, a.body, byNew.body)
	}

	// Duplicates of one key, half to each version at once: one payment.
	const rounds, perRound = 6, 8
	for round := range rounds {
		key, customer := fmt.Sprintf("both-%d", round), fmt.Sprintf("d%d", round)
		body := fmt.Sprintf(`{"customer":%q,"amount":%d,"currency":"EUR"}`, customer, 200+round)
		answers := make([]answer, perRound)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range perRound {
			to := old.url
			if i%2 == 1 {
				to = cur.URL
			}
			wg.Go(func() {
				<-start
				answers[i] = post(t, to, key, body, nil)
			})
		}
		close(start)
		wg.Wait()
		paid := ""
		for i, a := range answers {
			switch {
			case a.status == http.StatusCreated && (paid == "" || a.body == paid):
				paid = a.body
			case a.status == http.StatusConflict: // still in progress past the wait
			default:
				t.Fatalf("round %d, request %d (version %s): %d %s; want 201 with the one payment, or 409", round, i, []string{"old", "new"}[i%2], a.status, a.body)
			}
		}
		if n := payCount(t, pool, customer); paid == "" || n != 1 {
			t.Fatalf("round %d: %d payments, answered %q; want exactly one", round, n, paid)
		}
	}

	// A mark of this version whose owner is gone (its session ended after
	// BeginEffect): this version answers outcome-unknown, the old one in
	// progress (it knows no marks); neither runs the handler again.
	crashed := `{"customer":"c4","amount":104,"currency":"EUR"}`
	if a := post(t, cur.URL, "marked-then-gone", crashed, http.Header{"Crash-After-Mark": {"1"}}); a.status != http.StatusInternalServerError {
		t.Fatalf("the request whose owner went after its mark: %d %s; want 500 outcome-unknown", a.status, a.body)
	}
	if a := post(t, cur.URL, "marked-then-gone", crashed, nil); a.status != http.StatusInternalServerError || !strings.Contains(a.body, "outcome-unknown") {
		t.Fatalf("new version after the marked owner went: %d %s; want outcome-unknown", a.status, a.body)
	}
	if a := post(t, old.url, "marked-then-gone", crashed, http.Header{"Prefer": {"wait=0"}}); a.status != http.StatusConflict {
		t.Fatalf("old version after the marked owner went: %d %s; want 409 in progress (it never runs over a mark)", a.status, a.body)
	}
	if n := payCount(t, pool, "c4"); n != 0 {
		t.Fatalf("%d payments of the marked request; want 0 (its transaction ended with its session)", n)
	}

	if a := <-slow; a.status != http.StatusCreated {
		t.Fatalf("the old version's slow request: %d %s", a.status, a.body)
	}
	if err := old.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := old.cmd.Wait(); err != nil {
		t.Fatalf("old version after SIGTERM: %v\n%s", err, old.stderr)
	}
	// The last instance of the old version has gone: a Migrate with no claim
	// in progress drops the constraint, and the store goes on serving.
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if hasStateCheck(t, pool) {
		t.Fatal("Migrate with no claim in progress left the CHECK constraint")
	}
	if a := post(t, cur.URL, "after-upgrade", `{"customer":"c3","amount":103,"currency":"EUR"}`, nil); a.status != http.StatusCreated {
		t.Fatalf("after the upgrade: %d %s", a.status, a.body)
	}
	if a := post(t, cur.URL, "slow-on-old", `{"customer":"c1","amount":101,"currency":"EUR"}`, nil); a.status != http.StatusCreated || a.replayed != "true" {
		t.Fatalf("replay of the old version's slow request: %d %q %s", a.status, a.replayed, a.body)
	}
	if n := payCount(t, pool, ""); n != 4+rounds {
		t.Fatalf("%d payments in all; want %d", n, 4+rounds)
	}
}

// crashAfterMark serves a request with a Crash-After-Mark header as a
// process that crashes after BeginEffect and its handler would: the mark
// made, the payment written, then the claim's session ended (which rolls the
// payment back), so the answer cannot be recorded; others go to next alone.
func crashAfterMark(t *testing.T, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Crash-After-Mark") == "" {
			next.ServeHTTP(w, r)
			return
		}
		if err := server.BeginEffect(r.Context()); err != nil {
			t.Errorf("BeginEffect: %v", err)
		}
		next.ServeHTTP(w, r)
		var pid int32
		if err := pgstore.Tx(r.Context()).QueryRow(r.Context(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Errorf("the claim's session: %v", err)
		}
		endSession(t, pid)
	})
}

// endSession ends the test's own PostgreSQL session pid and waits until it
// has ended.
func endSession(t *testing.T, pid int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, servicetest.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var ended bool
	if err := conn.QueryRow(ctx, "SELECT pg_terminate_backend($1, 20000)", pid).Scan(&ended); err != nil || !ended {
		t.Fatalf("ending session %d: %v, %v", pid, ended, err)
	}
}

// answer is what a POST got.
type answer struct {
	status   int
	body     string
	replayed string // Idempotent-Replayed
}

// post sends a keyed payment as the token "upgrade" to base.
func post(t *testing.T, base, key, body string, h http.Header) answer {
	req, err := http.NewRequest(http.MethodPost, base+"/payments", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return answer{}
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer upgrade")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return answer{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Error(err)
	}
	return answer{status: resp.StatusCode, body: string(b), replayed: resp.Header.Get("Idempotent-Replayed")}
}

// upgradeSchema makes a schema of the test's own, dropped when it ends, and
// returns the test server's URL with that schema as search_path, and a pool
// on it.
func upgradeSchema(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	admin := testPool(t, 2)
	schema := "idem_upgrade_" + strings.ToLower(rand.Text()[:12])
	ctx := context.Background()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(servicetest.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	pool, err := pgstore.NewPool(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return u.String(), pool
}

// hasStateCheck reports whether the keys table has the old versions' CHECK
// constraint on state.
func hasStateCheck(t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_constraint
 WHERE conrelid = to_regclass($1) AND contype = 'c'`, upgradeKeys).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// waitForClaims waits until n transactions hold a lock on the keys table: a
// claim's read does, for as long as its handler runs.
func waitForClaims(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var held int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
 WHERE relation = to_regclass($1) AND granted AND pid <> pg_backend_pid()`, upgradeKeys).Scan(&held)
		if err != nil {
			t.Fatal(err)
		}
		if held >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d claims hold the keys table after 30s; want %d", held, n)
		}
		time.Sleep(10 * time.Millisecond) // polling PostgreSQL: no event to wait on
	}
}

// payCount counts the demo's payments of customer (all when "").
func payCount(t *testing.T, pool *pgxpool.Pool, customer string) int {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{upgradePayments}.Sanitize()+
		" WHERE $1 = '' OR customer = $1", customer).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// previous is a running idem-server of previousVersion.
type previous struct {
	cmd    *exec.Cmd
	url    string
	stderr *syncbuf.Buffer
}

// startPrevious starts previousVersion's idem-server with the PostgreSQL store
// on postgresURL and chaos headers allowed, stopped when the test ends.
func startPrevious(t *testing.T, postgresURL string) *previous {
	t.Helper()
	bin, err := buildPrevious()
	if err != nil {
		if servicetest.Required() {
			t.Fatalf("building idem-server at %s: %v", previousVersion[:12], err)
		}
		t.Skipf("building idem-server at %s (a git checkout with that commit is needed): %v", previousVersion[:12], err)
	}
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-store", "postgres", "-postgres-url", postgresURL, "-chaos")
	stderr := &syncbuf.Buffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("previous idem-server printed no address: %v\n%s", err, stderr)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return &previous{cmd: cmd, url: strings.TrimSpace(strings.TrimPrefix(line, "idem-server listening on ")), stderr: stderr}
}

// buildPrevious builds previousVersion's idem-server once per test run, from
// the commit's tree (git archive) with its own go.work.
var buildPrevious = sync.OnceValues(func() (string, error) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse: %w", err)
	}
	dir, err := os.MkdirTemp("", "idem-previous-")
	if err != nil {
		return "", err
	}
	previousDir = dir
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", strings.TrimSpace(string(top)), previousVersion, dir)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive: %v: %s", err, out)
	}
	bin := filepath.Join(dir, "idem-server")
	build := exec.Command("go", "build", "-o", bin, "./cmd/idem-server")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"), "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		return "", errors.Join(fmt.Errorf("go build: %w", err), errors.New(string(out)))
	}
	return bin, nil
})

// previousDir is where buildPrevious unpacked and built previousVersion;
// TestMain deletes it.
var previousDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if previousDir != "" {
		_ = os.RemoveAll(previousDir)
	}
	os.Exit(code)
}
