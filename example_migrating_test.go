package idem_test

// The Examples of docs/migrating-from-retryablehttp.md: each row of its table
// "What a go-retryablehttp user looks for" that has an equivalent shows it
// here, runnable; bench/migrating_test.go runs go-retryablehttp beside idem
// for the same rows.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
)

// go-retryablehttp's RetryWaitMin is a floor: its DefaultBackoff waits
// exactly min·2ⁿ (n from 0), capped at RetryWaitMax. WithBackoff's base is
// not: the default full jitter draws the first wait from [0, base). For a
// floor, NoJitter waits what DefaultBackoff waits, and DecorrelatedJitter
// never waits less than base, spreading above it.
func ExampleWithJitter_floor() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	for _, j := range []struct {
		name   string
		jitter idem.Jitter
	}{{"NoJitter", idem.NoJitter}, {"DecorrelatedJitter", idem.DecorrelatedJitter}} {
		var waits []time.Duration
		client := idem.NewClient(
			idem.WithMaxAttempts(4),                            // RetryMax 3
			idem.WithBackoff(10*time.Millisecond, time.Second), // RetryWaitMin, RetryWaitMax
			idem.WithJitter(j.jitter),
			idem.WithOnRetry(func(_ context.Context, next idem.AttemptInfo) { waits = append(waits, next.Wait) }),
		)
		resp, err := client.Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		floor := true
		for _, w := range waits {
			floor = floor && w >= 10*time.Millisecond
		}
		if j.jitter == idem.NoJitter {
			fmt.Println(j.name, waits)
		} else {
			fmt.Println(j.name, "waits", len(waits), "times, none below 10ms:", floor)
		}
	}
	// Output:
	// NoJitter [10ms 20ms 40ms]
	// DecorrelatedJitter waits 3 times, none below 10ms: true
}

// go-retryablehttp reads a body it cannot rewind (a plain io.Reader) into
// memory and retries it. idem sends such a body once, as net/http would: a
// 503 to it comes back as it is, with Report.Stop "not-retryable" (and a
// WithLogger line). A body with GetBody (http.NewRequest sets it for a
// *bytes.Reader, *bytes.Buffer or *strings.Reader) or a known ContentLength
// up to WithBodyBufferLimit (1 MiB) is retried.
func Example_migratingBodies() {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if n.Add(1) < 3 { // the first attempt of each operation below
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	client := idem.NewClient(
		idem.WithBackoff(time.Millisecond, time.Millisecond),
		idem.WithOnDone(func(_ context.Context, r idem.Report) {
			fmt.Println(r.Status, "after", r.Attempts, "attempt(s), stop:", r.Stop)
		}),
	)
	payload := []byte(`{"sku":"A1","qty":2}`)

	stream := io.MultiReader(bytes.NewReader(payload)) // an io.Reader: no length, no GetBody
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/carts/1", stream)
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()

	req, _ = http.NewRequest(http.MethodPut, srv.URL+"/carts/1", bytes.NewReader(payload)) // GetBody set
	resp, err = client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	// Output:
	// 503 after 1 attempt(s), stop: not-retryable
	// 200 after 2 attempt(s), stop: success
}

// errForbidden is an error of the caller's own, as a go-retryablehttp
// CheckRetry would return it.
var errForbidden = errors.New("orders: forbidden")

// go-retryablehttp's CheckRetry returns (bool, error): an error ends the
// retries, and Do returns it in place of the response. WithRetryIf returns
// a bool only: refuse the retry there, and turn the response into your error
// once RoundTrip has returned it. CheckRetry's context is the request's:
// idem stops on the context itself, and the predicate reads the request's
// values from resp.Request.Context() when there is a response.
func ExampleWithRetryIf_checkRetryError() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
	}))
	defer srv.Close()

	client := idem.NewClient(idem.WithRetryIf(func(resp *http.Response, err error, retryable bool) bool {
		if resp != nil && resp.StatusCode == http.StatusForbidden {
			return false // CheckRetry: return false, errForbidden
		}
		return retryable
	}))
	getOrder := func(url string) error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusForbidden {
			return fmt.Errorf("GET %s: %w", url, errForbidden) // what CheckRetry's error was for
		}
		return nil
	}
	err := getOrder(srv.URL + "/orders/1")
	fmt.Println(errors.Is(err, errForbidden))
	// Output: true
}

// go-retryablehttp's PrepareRetry(req) changes the request before each retry
// (a fresh signature, a new token). With idem the RoundTripper it wraps (the
// next of NewTransport) sees every attempt's request: AttemptInfo.Number > 1
// is a retry. It changes a clone, never the request it is given. Its error
// ends the attempt; WithRetryIf refusing that error ends the operation, as
// PrepareRetry's error does.
func ExampleNewTransport_prepareRetry() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("server: signature", r.Header.Get("X-Signature"))
		if r.Header.Get("X-Signature") == "sig-1" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	sign := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		a, _ := idem.AttemptFromContext(req.Context())
		r := req.Clone(req.Context()) // a RoundTripper must not change the request it is given
		r.Header.Set("X-Signature", fmt.Sprintf("sig-%d", a.Number))
		return http.DefaultTransport.RoundTrip(r)
	})
	client := &http.Client{Transport: idem.NewTransport(sign, idem.WithBackoff(time.Millisecond, time.Millisecond))}
	resp, err := client.Post(srv.URL+"/orders", "application/json", strings.NewReader(`{"sku":"A1"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	// Output:
	// server: signature sig-1
	// server: signature sig-2
	// 201
}

// go-retryablehttp's RequestLogHook(logger, req, attempt) counts attempts
// from 0; AttemptInfo.Number counts them from 1 (2 is the first retry), in
// the RoundTripper idem wraps as in WithOnRetry. Number-1 is
// go-retryablehttp's attempt.
func ExampleAttemptFromContext_requestLogHook() {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	logHook := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		a, _ := idem.AttemptFromContext(req.Context())
		fmt.Printf("attempt %d (go-retryablehttp's attempt %d) %s\n", a.Number, a.Number-1, req.Method)
		return http.DefaultTransport.RoundTrip(req)
	})
	client := &http.Client{Transport: idem.NewTransport(logHook, idem.WithBackoff(time.Millisecond, time.Millisecond))}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	// Output:
	// attempt 1 (go-retryablehttp's attempt 0) GET
	// attempt 2 (go-retryablehttp's attempt 1) GET
}
