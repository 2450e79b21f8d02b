package e2e

import (
	"net/url"
	"strconv"
	"testing"
)

// TestGatewayKilledMidForwardRedis's kill on PostgreSQL, in front of a
// Python service: every order made once, and each retry answered by its
// record or outcome-unknown within the client's cap. The claim is the
// request's transaction, which the kill rolls back; what keeps the key from
// a second forward is pgstore's durable effect mark (server.BeginEffect):
// without it, the retries forward again and every held order is made twice.
func TestGatewayKilledMidForwardPostgres(t *testing.T) {
	t.Parallel()
	// Each protected request at the upstream holds a connection (its
	// transaction): a pool of pgx's default size (4 on 2 cores, one kept in
	// reserve) would hold fewer than the test's.
	dsn := withPoolSize(t, postgresSchema(t), 16)
	runGatewayKill(t, "python", []string{"-store", "postgres", "-postgres-url", dsn}, func(string) {})
}

// withPoolSize sets pool_max_conns in a PostgreSQL URL.
func withPoolSize(t *testing.T, dsn string, n int) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		t.Skipf("IDEM_POSTGRES_URL is not a URL (%q): the test sets pool_max_conns in one", dsn)
	}
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(n))
	u.RawQuery = q.Encode()
	return u.String()
}
