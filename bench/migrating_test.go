package bench

// The rows of docs/migrating-from-retryablehttp.md, go-retryablehttp and idem
// side by side on the same server: what a go-retryablehttp user relies on,
// and what idem does in its place. The root package's Examples
// (example_migrating_test.go) show the idem side alone.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/idemkit/idem"
)

// migrationServer answers the first failures requests with status and every
// later one 200, and keeps what each request brought.
type migrationServer struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []string
	sigs   []string // X-Signature of each request
}

func newMigrationServer(t *testing.T, failures int32, status int) *migrationServer {
	s := &migrationServer{}
	var n atomic.Int32
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.bodies = append(s.bodies, string(b))
		s.sigs = append(s.sigs, r.Header.Get("X-Signature"))
		s.mu.Unlock()
		if n.Add(1) <= failures {
			w.WriteHeader(status)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *migrationServer) got() (bodies, sigs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...), append([]string(nil), s.sigs...)
}

// quickRetryable is go-retryablehttp's client as a migrating user has it,
// with waits of a millisecond and no logger.
func quickRetryable() *retryablehttp.Client {
	rc := retryablehttp.NewClient()
	rc.Logger = nil
	rc.RetryWaitMin, rc.RetryWaitMax = time.Millisecond, time.Millisecond
	return rc
}

// TestMigratingWaitFloor: go-retryablehttp's DefaultBackoff waits
// min·2ⁿ capped at max, so RetryWaitMin is a floor; idem's NoJitter waits
// exactly that, DecorrelatedJitter never less than base, and the default
// FullJitter draws the first wait below base (WithBackoff's base is no floor).
func TestMigratingWaitFloor(t *testing.T) {
	t.Parallel()
	const base, max = 2 * time.Millisecond, 16 * time.Millisecond
	srv := newMigrationServer(t, 1000, http.StatusServiceUnavailable)
	waitsOf := func(j idem.Jitter, attempts int) []time.Duration {
		var waits []time.Duration
		client := idem.NewClient(idem.WithMaxAttempts(attempts), idem.WithBackoff(base, max), idem.WithJitter(j),
			idem.WithOnRetry(func(_ context.Context, next idem.AttemptInfo) { waits = append(waits, next.Wait) }))
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return waits
	}

	got := waitsOf(idem.NoJitter, 7)
	for i, w := range got {
		if want := retryablehttp.DefaultBackoff(base, max, i, nil); w != want {
			t.Errorf("NoJitter: retry %d waited %v; go-retryablehttp's DefaultBackoff waits %v", i+1, w, want)
		}
	}
	if len(got) != 6 {
		t.Errorf("NoJitter: %d retries, want 6", len(got))
	}
	for i, w := range waitsOf(idem.DecorrelatedJitter, 7) {
		if w < base || w > max {
			t.Errorf("DecorrelatedJitter: retry %d waited %v; want from base %v to max %v", i+1, w, base, max)
		}
	}
	for range 10 {
		if w := waitsOf(idem.FullJitter, 2); len(w) != 1 || w[0] >= base {
			t.Fatalf("FullJitter: the first retry waited %v; want a wait below base %v, as the formula U[0, base) says", w, base)
		}
	}
}

// TestMigratingStreamBody: a body that is a plain io.Reader (no length, no
// GetBody) is read into memory and retried by go-retryablehttp's
// StandardClient; idem sends it once, returns the 503, says "not-retryable"
// in its Report, and logs why.
func TestMigratingStreamBody(t *testing.T) {
	t.Parallel()
	const payload = `{"sku":"A1","qty":2}`
	stream := func() io.Reader { return io.MultiReader(strings.NewReader(payload)) }

	srv := newMigrationServer(t, 1, http.StatusServiceUnavailable)
	req, _ := http.NewRequest(http.MethodPut, srv.URL, stream())
	resp, err := quickRetryable().StandardClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if bodies, _ := srv.got(); resp.StatusCode != http.StatusOK || len(bodies) != 2 || bodies[1] != payload {
		t.Errorf("go-retryablehttp: %d, bodies %q; want 200 after sending the whole body twice", resp.StatusCode, bodies)
	}

	srv = newMigrationServer(t, 1, http.StatusServiceUnavailable)
	var logs bytes.Buffer
	var stop string
	client := idem.NewClient(idem.WithBackoff(time.Millisecond, time.Millisecond),
		idem.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		idem.WithOnDone(func(_ context.Context, r idem.Report) { stop = r.Stop }))
	req, _ = http.NewRequest(http.MethodPut, srv.URL, stream())
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if bodies, _ := srv.got(); resp.StatusCode != http.StatusServiceUnavailable || len(bodies) != 1 || stop != "not-retryable" {
		t.Errorf("idem: %d after %d requests, stop %q; want the 503 after one, stop not-retryable", resp.StatusCode, len(bodies), stop)
	}
	if !strings.Contains(logs.String(), "cannot be sent again") {
		t.Errorf("idem logged %q; want the give-up and its reason", logs.String())
	}
}

type ctxKey struct{}

var errForbidden = errors.New("orders: forbidden")

// TestMigratingCheckRetry: go-retryablehttp's CheckRetry gets the request's
// context and may return an error, which Do returns in place of the
// response. idem's WithRetryIf reads the context's values from
// resp.Request.Context(), returns a bool, and the response comes back for
// the caller to turn into that error.
func TestMigratingCheckRetry(t *testing.T) {
	t.Parallel()
	ctx := context.WithValue(context.Background(), ctxKey{}, "tenant-7")

	srv := newMigrationServer(t, 1000, http.StatusForbidden)
	rc := quickRetryable()
	var sawRetryable any
	rc.CheckRetry = func(ctx context.Context, resp *http.Response, err error) (bool, error) {
		sawRetryable = ctx.Value(ctxKey{})
		if resp != nil && resp.StatusCode == http.StatusForbidden {
			return false, errForbidden
		}
		return retryablehttp.DefaultRetryPolicy(ctx, resp, err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := rc.StandardClient().Do(req)
	if resp != nil || !errors.Is(err, errForbidden) || sawRetryable != "tenant-7" {
		t.Errorf("go-retryablehttp: %v, %v, context value %v; want no response, errForbidden, tenant-7", resp, err, sawRetryable)
	}

	var sawIdem any
	client := idem.NewClient(idem.WithRetryIf(func(resp *http.Response, err error, retryable bool) bool {
		if resp == nil {
			return retryable
		}
		sawIdem = resp.Request.Context().Value(ctxKey{})
		return retryable && resp.StatusCode != http.StatusForbidden
	}))
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode == http.StatusForbidden {
		err = errForbidden // the caller's own mapping, where CheckRetry returned it
	}
	if !errors.Is(err, errForbidden) || sawIdem != "tenant-7" {
		t.Errorf("idem: %v, context value %v; want the 403 turned into errForbidden, tenant-7", err, sawIdem)
	}
}

var errSigning = errors.New("signer: key unavailable")

// TestMigratingPrepareRetry: go-retryablehttp calls PrepareRetry before each
// retry (not before the first attempt), and its error ends the retries. The
// RoundTripper idem wraps sees every attempt, AttemptInfo.Number > 1 for a
// retry; its error, refused by WithRetryIf, ends the operation the same way.
func TestMigratingPrepareRetry(t *testing.T) {
	t.Parallel()
	srv := newMigrationServer(t, 2, http.StatusServiceUnavailable)
	rc := quickRetryable()
	n := 0
	rc.PrepareRetry = func(req *http.Request) error {
		n++
		req.Header.Set("X-Signature", fmt.Sprintf("sig-%d", n+1))
		return nil
	}
	resp, err := rc.StandardClient().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	_, rhSigs := srv.got()

	srv = newMigrationServer(t, 2, http.StatusServiceUnavailable)
	sign := roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if a, _ := idem.AttemptFromContext(req.Context()); a.Number > 1 { // a retry: what PrepareRetry sees
			req = req.Clone(req.Context())
			req.Header.Set("X-Signature", fmt.Sprintf("sig-%d", a.Number))
		}
		return http.DefaultTransport.RoundTrip(req)
	})
	client := &http.Client{Transport: idem.NewTransport(sign, idem.WithBackoff(time.Millisecond, time.Millisecond))}
	resp, err = client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	_, idemSigs := srv.got()
	want := []string{"", "sig-2", "sig-3"}
	if fmt.Sprint(rhSigs) != fmt.Sprint(want) || fmt.Sprint(idemSigs) != fmt.Sprint(want) {
		t.Errorf("signatures go-retryablehttp %q, idem %q; want %q from both", rhSigs, idemSigs, want)
	}

	// An error ends the operation.
	srv = newMigrationServer(t, 1000, http.StatusServiceUnavailable)
	rc.PrepareRetry = func(*http.Request) error { return errSigning }
	if _, err := rc.StandardClient().Get(srv.URL); !errors.Is(err, errSigning) {
		t.Errorf("go-retryablehttp: %v; want errSigning", err)
	}
	failing := roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if a, _ := idem.AttemptFromContext(req.Context()); a.Number > 1 {
			return nil, errSigning
		}
		return http.DefaultTransport.RoundTrip(req)
	})
	client = &http.Client{Transport: idem.NewTransport(failing, idem.WithBackoff(time.Millisecond, time.Millisecond),
		idem.WithRetryIf(func(resp *http.Response, err error, retryable bool) bool {
			return retryable && !errors.Is(err, errSigning)
		}))}
	if _, err := client.Get(srv.URL); !errors.Is(err, errSigning) {
		t.Errorf("idem: %v; want errSigning", err)
	}
	if bodies, _ := srv.got(); len(bodies) != 2 {
		t.Errorf("%d requests reached the server; want the first attempt of each client only", len(bodies))
	}
}

// TestMigratingRequestLogHook: go-retryablehttp's RequestLogHook counts
// attempts from 0, AttemptInfo.Number from 1.
func TestMigratingRequestLogHook(t *testing.T) {
	t.Parallel()
	srv := newMigrationServer(t, 2, http.StatusBadGateway)
	rc := quickRetryable()
	var rh []int
	rc.RequestLogHook = func(_ retryablehttp.Logger, _ *http.Request, attempt int) { rh = append(rh, attempt) }
	resp, err := rc.StandardClient().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()

	srv = newMigrationServer(t, 2, http.StatusBadGateway)
	var numbers []int
	hook := roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		a, _ := idem.AttemptFromContext(req.Context())
		numbers = append(numbers, a.Number)
		return http.DefaultTransport.RoundTrip(req)
	})
	client := &http.Client{Transport: idem.NewTransport(hook, idem.WithBackoff(time.Millisecond, time.Millisecond))}
	resp, err = client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if fmt.Sprint(rh) != "[0 1 2]" || fmt.Sprint(numbers) != "[1 2 3]" {
		t.Errorf("attempts: go-retryablehttp %v, idem %v; want [0 1 2] and [1 2 3]", rh, numbers)
	}
}

// roundTripperFunc makes a function an http.RoundTripper.
type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestMigratingCustomBackoff: the Backoff row. go-retryablehttp's
// LinearJitterBackoff waits a random time between min·n and max·n before retry
// n: a floor of min that grows; idem has no function of its own to plug in,
// and DecorrelatedJitter, the nearest, keeps the floor of base and spreads
// above it. A Backoff written to read Retry-After is not needed: idem waits
// what a 503's Retry-After says, whatever its backoff.
func TestMigratingCustomBackoff(t *testing.T) {
	t.Parallel()
	const base, max = 2 * time.Millisecond, 16 * time.Millisecond
	for n := 1; n <= 5; n++ {
		w := retryablehttp.LinearJitterBackoff(base, max, n-1, nil)
		if w < base*time.Duration(n) || w > max*time.Duration(n) {
			t.Errorf("LinearJitterBackoff: retry %d waits %v, want from %v to %v", n, w, base*time.Duration(n), max*time.Duration(n))
		}
	}
	srv := newMigrationServer(t, 1000, http.StatusServiceUnavailable)
	var waits []time.Duration
	client := idem.NewClient(idem.WithMaxAttempts(6), idem.WithBackoff(base, max), idem.WithJitter(idem.DecorrelatedJitter),
		idem.WithOnRetry(func(_ context.Context, next idem.AttemptInfo) { waits = append(waits, next.Wait) }))
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if len(waits) != 5 {
		t.Fatalf("DecorrelatedJitter: %d retries, want 5", len(waits))
	}
	for i, w := range waits {
		if w < base || w > max {
			t.Errorf("DecorrelatedJitter: retry %d waited %v, want from base %v to max %v", i+1, w, base, max)
		}
	}

	// A 503 with Retry-After: 1, then 200: the retry waits the second the
	// server asked for (plus idem's spread of at most a tenth), not the
	// millisecond of the backoff.
	var n atomic.Int32
	ra := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(ra.Close)
	var waited []time.Duration
	client = idem.NewClient(idem.WithBackoff(time.Millisecond, time.Millisecond),
		idem.WithOnRetry(func(_ context.Context, next idem.AttemptInfo) { waited = append(waited, next.Wait) }))
	start := time.Now()
	resp, err = client.Get(ra.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(waited) != 1 || waited[0] < time.Second || waited[0] >= 1100*time.Millisecond ||
		time.Since(start) < time.Second {
		t.Errorf("503 with Retry-After: 1: %d after %v, planned waits %v; want 200 after one wait in [1s, 1.1s)", resp.StatusCode,
			time.Since(start), waited)
	}
}
