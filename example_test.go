package idem_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
)

// A client that retries a POST safely: the server fails the first attempt, and
// the retry carries the same Idempotency-Key.
func ExampleNewClient() {
	var (
		mu   sync.Mutex
		keys []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		n := len(keys)
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	client := idem.NewClient(idem.WithMaxAttempts(3), idem.WithBackoff(time.Millisecond, 10*time.Millisecond))
	resp, err := client.Post(srv.URL+"/payments", "application/json", strings.NewReader(`{"amount":100}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, len(keys), "attempts, same key:", keys[0] == keys[1])
	attempt, _ := idem.AttemptFromContext(resp.Request.Context())
	fmt.Println("key reported:", attempt.Key == keys[0])
	// Output:
	// 201 2 attempts, same key: true
	// key reported: true
}

// A key given through the context is sent on the request, whatever its method.
func ExampleContextWithKey() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Header.Get("Idempotency-Key"))
	}))
	defer srv.Close()

	ctx := idem.ContextWithKey(context.Background(), "order-42-capture")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/orders/42", strings.NewReader("{}"))
	resp, err := idem.NewClient().Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(string(b))
	// Output: order-42-capture
}

// KeyFor derives the same key for the same business operation in every
// process, so a job re-run after a crash sends the key it sent before.
func ExampleKeyFor() {
	k1 := idem.KeyFor("invoices", "INV-2024-0042")
	k2 := idem.KeyFor("invoices", "INV-2024-0042")
	fmt.Println(k1)
	fmt.Println(k1 == k2, k1 == idem.KeyFor("refunds", "INV-2024-0042"))
	// Output:
	// 286f987a-6196-5c51-a94f-1495d1da8d7f
	// true false
}

// A handler that calls other services derives their keys from its own, so a
// retry of the handler (same upstream key) sends the same keys downstream.
func ExampleDeriveKey() {
	upstream := "9b2c7a1e-3f4d-4c5b-8a6e-7d8f9a0b1c2d" // from the incoming Idempotency-Key
	charge := idem.DeriveKey(upstream, "charge-card")
	email := idem.DeriveKey(upstream, "send-receipt")
	fmt.Println(charge == idem.DeriveKey(upstream, "charge-card"), charge == email)
	fmt.Println(len(charge))
	// Output:
	// true false
	// 36
}

// Replayed tells a first execution from a replay of a stored response.
func ExampleReplayed() {
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		replay := seen[key]
		seen[key] = true
		mu.Unlock()
		if replay {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	client := idem.NewClient()
	ctx := idem.ContextWithKey(context.Background(), idem.KeyFor("orders", "42"))
	for range 2 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/orders", strings.NewReader("{}"))
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, "replayed:", idem.Replayed(resp))
	}
	// Output:
	// 201 replayed: false
	// 201 replayed: true
}

// Two Transports calling one failing dependency share a Budget: together
// they may retry only about half as often as they start operations here, so
// the dependency sees at most 1.5 times its normal load instead of 3 times.
func ExampleNewBudget() {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable) // the dependency is down
	}))
	defer srv.Close()

	budget := idem.NewBudget(0.5, 0)
	opts := []idem.Option{idem.WithRetryBudget(budget), idem.WithMaxAttempts(3), idem.WithBackoff(time.Millisecond, time.Millisecond)}
	clients := []*http.Client{
		{Transport: idem.NewTransport(nil, opts...)},
		{Transport: idem.NewTransport(nil, opts...)},
	}
	for i := 0; i < 10; i++ {
		resp, err := clients[i%2].Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
	}
	st := budget.Stats()
	fmt.Printf("operations %d, retries allowed %d, denied %d, requests sent %d\n",
		st.Requests, st.RetriesAllowed, st.RetriesDenied, hits.Load())
	// Output: operations 10, retries allowed 5, denied 10, requests sent 15
}

// NewTransport wraps a transport of your own; attempts go through it, each
// with its AttemptInfo in the request's context.
func ExampleNewTransport() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Attempt") == "1" {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	// The inner transport marks each attempt with its number.
	inner := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		a, _ := idem.AttemptFromContext(req.Context())
		req = req.Clone(req.Context())
		req.Header.Set("X-Attempt", fmt.Sprint(a.Number))
		fmt.Printf("attempt %d (reason %q)\n", a.Number, a.Reason)
		return http.DefaultTransport.RoundTrip(req)
	})
	client := &http.Client{Transport: idem.NewTransport(inner, idem.WithBackoff(time.Millisecond, time.Millisecond))}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	// Output:
	// attempt 1 (reason "")
	// attempt 2 (reason "status")
	// 200
}

// WithOnDone reports each operation once, when it ends: how many attempts,
// why it stopped, with the key it sent.
func ExampleWithOnDone() {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	client := idem.NewClient(
		idem.WithBackoff(time.Millisecond, time.Millisecond),
		idem.WithOnDone(func(ctx context.Context, r idem.Report) {
			fmt.Println(r.Method, r.Attempts, "attempts,", r.Status, r.Stop, "keyed:", r.Key != "")
		}),
	)
	resp, err := client.Post(srv.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	// Output: POST 2 attempts, 201 success keyed: true
}

// WithRetryIf adds an answer an API uses for "try again" (here 425) and
// refuses to retry another (a 503 from a dependency known to stay down);
// the rest is the Transport's own table.
func ExampleWithRetryIf() {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusTooEarly)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	client := idem.NewClient(
		idem.WithBackoff(time.Millisecond, time.Millisecond),
		idem.WithRetryIf(func(resp *http.Response, err error, retryable bool) bool {
			switch {
			case resp != nil && resp.StatusCode == http.StatusTooEarly:
				return true
			case resp != nil && resp.StatusCode == http.StatusServiceUnavailable:
				return false
			}
			return retryable
		}),
	)
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", n.Load(), "requests")
	// Output: 200 after 2 requests
}

// roundTripFunc makes a function an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A go-retryablehttp client, and the idem client that takes its place (see
// docs/migrating-from-retryablehttp.md):
//
//	rc := retryablehttp.NewClient()
//	rc.RetryMax = 4                                   // retries, the first attempt not counted
//	rc.RetryWaitMin, rc.RetryWaitMax = 100*time.Millisecond, 2*time.Second
//	rc.CheckRetry = myCheckRetry                      // (ctx, resp, err) (bool, error)
//	rc.Logger = nil                                   // it logs by default
//	client := rc.StandardClient()
func Example_migratingFromRetryablehttp() {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Println("server: key sent on attempt", n.Load(), "of the POST:", r.Header.Get("Idempotency-Key") != "")
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	client := idem.NewClient(
		idem.WithMaxAttempts(5),                               // RetryMax 4 + the first attempt
		idem.WithBackoff(100*time.Millisecond, 2*time.Second), // RetryWaitMin, RetryWaitMax
		idem.WithRetryIf(func(resp *http.Response, err error, retryable bool) bool { // CheckRetry
			return retryable // the Transport's table: keep it, add to it, or refuse
		}),
		idem.WithOnRetry(func(ctx context.Context, next idem.AttemptInfo) { // RequestLogHook, for retries
			fmt.Println("retry", next.Number-1, "after status", next.Status, "reason", next.Reason)
		}),
	)
	// A POST is retried too: the Transport gives it an Idempotency-Key, the
	// same on every attempt (go-retryablehttp repeats a POST without one).
	resp, err := client.Post(srv.URL+"/orders", "application/json", strings.NewReader(`{"sku":"A1"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	// Output:
	// retry 1 after status 503 reason status
	// retry 2 after status 503 reason status
	// server: key sent on attempt 3 of the POST: true
	// 201
}
