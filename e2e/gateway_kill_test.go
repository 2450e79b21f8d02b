package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/server"
)

// gatewayKillLockTTL is the gateways' -lock-ttl in the kill tests: a claim
// whose owner was killed blocks its key for this plus the grace (1 s), which
// the retries' cap must cover.
const gatewayKillLockTTL = "3s"

// The gateway on Redis is killed (SIGKILL) while protected requests are at
// the upstream (a Node service holding their answers), after they left,
// before their answers could be recorded; it is restarted and every key is
// retried by the idem client. Every order was made once; a key answered
// before the kill gets its recorded answer, every other key the documented
// outcome-unknown problem once the dead owner's lease and grace are over
// (409 until then), within the client's cap. Before the durable mark, the
// retries forwarded again and every held order was made twice.
func TestGatewayKilledMidForwardRedis(t *testing.T) {
	t.Parallel()
	addr, forget := sharedRedis(t)
	runGatewayKill(t, "node", []string{"-store", "redis", "-redis-addr", addr}, forget)
}

// runGatewayKill runs the kill test against a gateway on the store that
// storeArgs name, in front of the service in lang; forget is called with each
// key the test sends.
func runGatewayKill(t *testing.T, lang string, storeArgs []string, forget func(key string)) {
	up := startUpstream(t, lang)
	args := append([]string{"-upstream", up.URL, "-lock-ttl", gatewayKillLockTTL}, storeArgs...)
	gw := startServer(t, args...)
	run := randomSuffix()
	customer := func(i int) string { return fmt.Sprintf("kill-%s-%d", run, i) }
	key := func(i int) string { return fmt.Sprintf("kill-key-%s-%d", run, i) }

	// One order answered and recorded before the kill.
	forget(key(0))
	if r := rawOrder(context.Background(), gw.URL, key(0), customer(0), false); r.status != http.StatusCreated {
		t.Fatalf("the order before the kill: %d %s", r.status, r.body)
	}
	up.waitOrders(t, 1)
	// Held ones: the upstream makes the orders and keeps the answers.
	const held = 4
	for i := 1; i <= held; i++ {
		forget(key(i))
		go rawOrder(context.Background(), gw.URL, key(i), customer(i), true)
	}
	up.waitOrders(t, held)
	if err := gw.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	up.release(t) // their answers go to a dead gateway
	restarted := startServer(t, args...)

	client := &http.Client{Transport: idem.NewTransport(baseTransport(), idem.WithBackoff(50*time.Millisecond, 500*time.Millisecond),
		idem.WithMaxElapsed(gatewayKillCap))}
	for i := 0; i <= held; i++ {
		start := time.Now()
		ctx, cancel := context.WithTimeout(idem.ContextWithKey(context.Background(), key(i)), 30*time.Second)
		r := clientOrder(ctx, t, client, restarted.URL, customer(i))
		cancel()
		switch {
		case i == 0 && (r.status != http.StatusCreated || !r.replayed):
			t.Errorf("key %d, answered before the kill: %d replayed=%v %s, want its recorded 201", i, r.status, r.replayed, r.body)
		case i > 0 && (r.status != http.StatusInternalServerError || problemType(r.body) != server.ProblemOutcomeUnknown):
			t.Errorf("key %d, at the upstream when the gateway died: %d %s, want 500 outcome-unknown", i, r.status, r.body)
		}
		if took := time.Since(start); took > gatewayKillCap+time.Second {
			t.Errorf("key %d: answered after %v, past the client's cap of %v (and a second to read the answer)", i, took, gatewayKillCap)
		}
		if n := up.count(t, customer(i)); n != 1 {
			t.Errorf("key %d: the %s service made the order %d times, want 1", i, lang, n)
		}
	}
}

// gatewayKillCap is the retries' cap (WithMaxElapsed) after the gateway's restart:
// each retry must end with the record or outcome-unknown within it.
const gatewayKillCap = 20 * time.Second

// rawOrder sends one order with key, once, holding its answer at the upstream
// when hold is set.
func rawOrder(ctx context.Context, base, key, customer string, hold bool) reply {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/orders", strings.NewReader(orderBody(customer, 1999)))
	if err != nil {
		return reply{bodyErr: err}
	}
	req.Header.Set("Authorization", "Bearer alice")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(server.HeaderKey, key)
	if hold {
		req.Header.Set("X-Hold", "1")
	}
	resp, err := baseTransport().RoundTrip(req)
	if err != nil {
		return reply{bodyErr: err}
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode, replayed: resp.Header.Get(server.HeaderReplayed) == "true"}
	r.body, r.bodyErr = io.ReadAll(resp.Body)
	return r
}

// clientOrder sends one order through the idem client.
func clientOrder(ctx context.Context, t *testing.T, client *http.Client, base, customer string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/orders", strings.NewReader(orderBody(customer, 1999)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer alice")
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return reply{bodyErr: err, body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode, replayed: idem.Replayed(resp)}
	r.body, r.bodyErr = io.ReadAll(resp.Body)
	return r
}

// problemType is the "type" of a problem body, or "".
func problemType(body []byte) string {
	var p struct{ Type string }
	_ = json.Unmarshal(body, &p)
	return p.Type
}
