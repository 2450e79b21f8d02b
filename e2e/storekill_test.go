package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/server/chaos"
)

// The store-kill soak's stream and faults.
const (
	killWorkers = 8  // operations in flight
	killOps     = 30 // logical payments per worker
	// killAfterWriteMax draws each operation's answer delay after its write
	// from U[0, killAfterWriteMax): a kill lands on handlers past their write.
	killAfterWriteMax = 250 * time.Millisecond
	// killDowntime is how long the store stays down each time: longer than
	// the Redis client's own redials absorb (about a second), so requests in
	// flight fail.
	killDowntime    = 1500 * time.Millisecond
	killMaxAttempts = 10
	killCap         = 10 * time.Second // per operation (WithMaxElapsed)
	// killSlack is how far past its cap an operation may end (noticing the
	// cap, a last attempt's time-out), generous for a loaded machine.
	killSlack = 3 * time.Second
	// killLockTTL is the server's -lock-ttl: longer than the outage, so a
	// claim left behind by a failed record outlives it (the store can still
	// settle it when it is back), and shorter than an operation's cap, so a
	// retry that would run the handler again after the claim expires does so
	// during the test.
	killLockTTL = 5 * time.Second
	// killBound bounds the stream (a failing run ends there).
	killBound = 40 * time.Second
)

// killOp is how one operation of the store-kill soak ended.
type killOp struct {
	customer, key string
	status        int
	replayed      bool
	problem       string // the problem type of a non-2xx answer, "" if none
	contentType   string
	err           error
	elapsed       time.Duration
}

// class names how the operation ended, for the log and the checks.
func (o killOp) class() string {
	switch {
	case o.err != nil:
		var e *idem.Error
		if errors.As(o.err, &e) {
			why := "no cause"
			if e.Cause != nil {
				why = e.Cause.Error()
			}
			return fmt.Sprintf("error after %d attempts (%s, last status %d)", e.Attempts, why, e.LastStatus)
		}
		return fmt.Sprintf("error %T", o.err)
	case o.status == http.StatusCreated && o.replayed:
		return "201 replay"
	case o.status == http.StatusCreated:
		return "201"
	case o.problem != "":
		return fmt.Sprintf("%d %s", o.status, strings.TrimPrefix(o.problem, "https://github.com/idemkit/idem/blob/main/docs/problems.md"))
	}
	return fmt.Sprintf("%d %s", o.status, o.contentType)
}

// TestStoreKillSoak is issue 12's store-kill soak: idem-server on a private
// Redis (appendfsync always; the payments in the server's memory) and on a
// private PostgreSQL (keys and payments in one database), a keyed stream of
// payments from killWorkers workers with retries, each answered up to 250 ms
// after its write, while the store is killed (SIGKILL) and restarted twice.
// No customer is ever charged twice; every operation ends within its cap with
// a 201 or a clear error (a problem+json answer, or an *idem.Error saying why
// it stopped); and the operations that did not succeed, run once more with
// their keys after the stream, still charge nobody twice.
func TestStoreKillSoak(t *testing.T) {
	skipShort(t)
	t.Parallel()
	cases := []struct {
		name  string
		start func(t *testing.T) (store *killable, args []string)
	}{
		{"redis", func(t *testing.T) (*killable, []string) {
			k, addr := startPrivateRedis(t)
			return k, []string{"-store", "redis", "-redis-addr", addr}
		}},
		{"postgres", func(t *testing.T) (*killable, []string) {
			k, url := startPrivatePostgres(t)
			return k, []string{"-store", "postgres", "-postgres-url", url}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			store, args := c.start(t)
			srv := startServer(t, append(args, "-chaos", "-lock-ttl", killLockTTL.String())...)
			runKillSoak(t, srv, store)
		})
	}
}

func runKillSoak(t *testing.T, srv *serverProcess, store *killable) {
	run := randomSuffix()
	n := killWorkers * killOps
	ops := make([]killOp, n)
	delays := make([]time.Duration, n)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 12))
	for i := range ops {
		ops[i].customer = fmt.Sprintf("cus_kill_%s_%03d", run, i)
		ops[i].key = idem.KeyFor("e2e-store-kill-"+run, ops[i].customer)
		delays[i] = time.Duration(rng.Int64N(int64(killAfterWriteMax)))
	}

	ctx, cancel := context.WithTimeout(context.Background(), killBound)
	defer cancel()
	// The kills come at a quarter and at three fifths of the stream.
	var done atomic.Int64
	marks := []int64{int64(n) / 4, int64(n) * 3 / 5}
	reached := make([]chan struct{}, len(marks))
	for i := range reached {
		reached[i] = make(chan struct{})
	}
	type killReport struct {
		at  []time.Duration // when each kill happened, from start
		err error
	}
	killed := make(chan killReport, 1)
	start := time.Now()
	go func() {
		var r killReport
		defer func() { killed <- r }()
		for i := range marks {
			select {
			case <-reached[i]:
			case <-ctx.Done():
				return
			}
			r.at = append(r.at, time.Since(start))
			if r.err = store.kill(); r.err != nil {
				return
			}
			select {
			case <-time.After(killDowntime): // the outage itself
			case <-ctx.Done():
			}
			if r.err = store.start(); r.err != nil {
				return
			}
		}
	}()

	jobs := make(chan int)
	var wg sync.WaitGroup
	for range killWorkers {
		client := &http.Client{Transport: idem.NewTransport(baseTransport(),
			idem.WithMaxAttempts(killMaxAttempts),
			idem.WithBackoff(50*time.Millisecond, time.Second),
			idem.WithAttemptTimeout(2*time.Second),
			idem.WithMaxElapsed(killCap),
		)}
		wg.Go(func() {
			for i := range jobs {
				ops[i] = killPay(ctx, client, srv.URL, ops[i], delays[i])
				d := done.Add(1)
				for m, mark := range marks {
					if d == mark {
						close(reached[m])
					}
				}
			}
		})
	}
	for i := range ops {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)
	cancel()
	kr := <-killed
	kills := kr.at
	if kr.err != nil {
		t.Fatal(kr.err)
	}
	if len(kills) != len(marks) {
		t.Fatalf("the store was killed %d times, want %d: the stream ended first", len(kills), len(marks))
	}

	// Every operation that did not succeed runs once more with its key, after
	// the claims of the stream have expired.
	var again []int
	for i, o := range ops {
		if !(o.err == nil && o.status == http.StatusCreated) {
			again = append(again, i)
		}
	}
	rerun := make([]killOp, len(again))
	if len(again) > 0 {
		client := &http.Client{Transport: idem.NewTransport(baseTransport(),
			idem.WithMaxAttempts(killMaxAttempts), idem.WithBackoff(50*time.Millisecond, time.Second),
			idem.WithAttemptTimeout(2*time.Second), idem.WithMaxElapsed(killCap))}
		rctx, rcancel := context.WithTimeout(context.Background(), killCap+killSlack)
		var rwg sync.WaitGroup
		for j, i := range again {
			rwg.Go(func() { rerun[j] = killPay(rctx, client, srv.URL, ops[i], 0) })
		}
		rwg.Wait()
		rcancel()
	}

	// How everything ended.
	charged := srv.paymentsByCustomer(t)
	classes := map[string]int{}
	errorsCharged := 0
	for _, o := range ops {
		classes[o.class()]++
		checkKillEnding(t, o)
		if o.status != http.StatusCreated && charged[o.customer] > 0 {
			errorsCharged++
		}
	}
	rerunClasses := map[string]int{}
	for _, o := range rerun {
		rerunClasses[o.class()]++
		checkKillEnding(t, o)
	}
	duplicates, uncharged := 0, 0
	for _, o := range ops {
		switch p := charged[o.customer]; {
		case p == 0:
			uncharged++
		case p > 1:
			if duplicates == 0 {
				t.Logf("the server's log of the first operation charged twice, %s:\n%s", o.customer, srv.logOf(o.key))
			}
			duplicates += p - 1
			t.Errorf("%s (key %s): %d payments, want at most 1 (%s)", o.customer, o.key, p, o.class())
		}
		if o.err == nil && o.status == http.StatusCreated && charged[o.customer] != 1 {
			t.Errorf("%s: answered 201 with %d payments, want 1", o.customer, charged[o.customer])
		}
	}
	t.Logf("%d operations (delays seed %d) in %v, store killed at %v for %v each: %d duplicate payments, %d uncharged; %d ended without a 201 (%d of them charged)",
		n, seed, elapsed.Round(time.Millisecond), roundAll(kills), killDowntime, duplicates, uncharged, len(again), errorsCharged)
	t.Logf("endings: %s", formatClasses(classes))
	if len(rerun) > 0 {
		t.Logf("re-run of the %d without a 201: %s", len(rerun), formatClasses(rerunClasses))
	}
	if duplicates > 0 {
		t.Errorf("%d duplicate payments (invariant 1)", duplicates)
	}
}

// killPay runs o's payment, answered delay after its write, with o's key.
func killPay(ctx context.Context, client *http.Client, url string, o killOp, delay time.Duration) killOp {
	req, err := http.NewRequestWithContext(idem.ContextWithKey(ctx, o.key), http.MethodPost, url+"/payments", strings.NewReader(paymentBody(o.customer)))
	if err != nil {
		o.err = err
		return o
	}
	req.Header.Set("Content-Type", "application/json")
	if delay > 0 {
		req.Header.Set(chaos.HeaderDelayAfterWrite, delay.String())
	}
	start := time.Now()
	resp, err := client.Do(req)
	o.status, o.replayed, o.problem, o.contentType, o.err = 0, false, "", "", err
	if err == nil {
		o.status, o.replayed = resp.StatusCode, idem.Replayed(resp)
		o.contentType = resp.Header.Get("Content-Type")
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr != nil {
			o.err = rerr
		} else if mt, _, _ := mime.ParseMediaType(o.contentType); mt == "application/problem+json" {
			var p struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(body, &p) == nil {
				o.problem = p.Type
			}
		}
	}
	o.elapsed = time.Since(start)
	return o
}

// checkKillEnding checks invariant 2 for one operation: it ended within its
// cap with a 201, a problem+json answer naming its type, or an *idem.Error
// that names its key and why it stopped.
func checkKillEnding(t *testing.T, o killOp) {
	t.Helper()
	if o.elapsed > killCap+killSlack {
		t.Errorf("%s: ended after %v, past its cap of %v (%s)", o.customer, o.elapsed.Round(time.Millisecond), killCap, o.class())
	}
	var e *idem.Error
	switch {
	case o.err != nil:
		if !errors.As(o.err, &e) || e.Key != o.key || e.Cause == nil {
			t.Errorf("%s: ended with %v (%T), want an *idem.Error with its key and a cause", o.customer, o.err, o.err)
		}
	case o.status == http.StatusCreated:
	case o.problem == "":
		t.Errorf("%s: ended with %d %q, want a 201 or a problem+json answer with a type", o.customer, o.status, o.contentType)
	}
}

// paymentsByCustomer returns the number of payments of every customer in the
// server's ledger.
func (p *serverProcess) paymentsByCustomer(t *testing.T) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]int{}
	for after := ""; ; {
		u := p.URL + "/payments?limit=1000"
		if after != "" {
			u += "&after=" + url.QueryEscape(after)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET /payments: %v", err)
		}
		var page struct {
			Payments []struct {
				Customer string `json:"customer"`
			} `json:"payments"`
			Next string `json:"next"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /payments: status %d, %v", resp.StatusCode, err)
		}
		for _, pm := range page.Payments {
			out[pm.Customer]++
		}
		if after = page.Next; after == "" { // one page at a time, as the demo answers
			return out
		}
	}
}

func formatClasses(m map[string]int) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	return strings.Join(parts, "; ")
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
