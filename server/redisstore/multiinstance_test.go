package redisstore

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/internal/demo/payments"
	"github.com/idemkit/idem/server"
)

type httpReply struct {
	status   int
	replayed bool
	body     string
}

func postPayment(t *testing.T, url, key, body string) httpReply {
	t.Helper()
	r, err := http.NewRequest(http.MethodPost, url+"/payments", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return httpReply{}
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(server.HeaderKey, key)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Error(err)
		return httpReply{}
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return httpReply{status: resp.StatusCode, replayed: resp.Header.Get(server.HeaderReplayed) == "true", body: string(b)}
}

// Two server instances, each with its own Redis client and middleware, share
// one Redis and one ledger; concurrent duplicates split across them make
// exactly one payment per key, and both instances replay it afterwards.
func TestMultiInstanceExactlyOnePayment(t *testing.T) {
	t.Parallel()
	const keys, dupsPerInstance = 5, 10
	ledger := payments.NewMemLedger()
	prefix := testPrefix(t, sharedRedis(t))
	var urls []string
	for range 2 {
		store := New(newClient(t), WithPrefix(prefix))
		api := &payments.API{Ledger: ledger}
		mux := http.NewServeMux()
		mux.Handle("POST /payments", server.Middleware(store)(http.HandlerFunc(api.Create)))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}

	start := make(chan struct{})
	var mu sync.Mutex
	replies, bodies := map[string][]httpReply{}, map[string]string{}
	var wg sync.WaitGroup
	for k := range keys {
		key := fmt.Sprintf("pay-%d", k)
		body := fmt.Sprintf(`{"customer":"multi-%d","amount":%d,"currency":"EUR"}`, k, 100+k)
		bodies[key] = body
		for i := range 2 * dupsPerInstance {
			wg.Go(func() {
				<-start
				rep := postPayment(t, urls[i%2], key, body)
				mu.Lock()
				replies[key] = append(replies[key], rep)
				mu.Unlock()
			})
		}
	}
	close(start)
	wg.Wait()

	if n := ledger.Count(""); n != keys {
		t.Fatalf("%d payments for %d keys, want exactly one per key", n, keys)
	}
	for key, reps := range replies {
		var executed []httpReply
		for _, r := range reps {
			switch {
			case r.status == http.StatusCreated && !r.replayed:
				executed = append(executed, r)
			case r.status == http.StatusCreated, r.status == http.StatusConflict:
			default:
				t.Errorf("key %s: status %d %s", key, r.status, r.body)
			}
		}
		if len(executed) != 1 {
			t.Fatalf("key %s: %d first executions, want 1", key, len(executed))
		}
		for _, url := range urls {
			rep := postPayment(t, url, key, bodies[key])
			if rep.status != http.StatusCreated || !rep.replayed || rep.body != executed[0].body {
				t.Fatalf("key %s on %s: %d replayed=%v %q, want the replay of %q", key, url, rep.status, rep.replayed, rep.body, executed[0].body)
			}
		}
	}
}
