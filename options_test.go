package idem

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestOptionsPanic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		make func()
		want string
	}{
		{"MaxAttempts 0", func() { WithMaxAttempts(0) }, "idem: WithMaxAttempts: n must be >= 1, got 0"},
		{"MaxAttempts -1", func() { WithMaxAttempts(-1) }, "idem: WithMaxAttempts: n must be >= 1, got -1"},
		{"Backoff negative", func() { WithBackoff(-1, time.Second) }, "idem: WithBackoff: durations must not be negative"},
		{"Backoff base > max", func() { WithBackoff(2*time.Second, time.Second) }, "idem: WithBackoff: base must be <= max"},
		{"Jitter invalid", func() { WithJitter(Jitter(9)) }, "idem: WithJitter: invalid Jitter 9"},
		{"MaxElapsed 0", func() { WithMaxElapsed(0) }, "idem: WithMaxElapsed: d must be > 0"},
		{"AttemptTimeout negative", func() { WithAttemptTimeout(-time.Second) }, "idem: WithAttemptTimeout: d must not be negative"},
		{"MaxRetryAfter negative", func() { WithMaxRetryAfter(-1) }, "idem: WithMaxRetryAfter: d must not be negative"},
		{"KeyGenerator nil", func() { WithKeyGenerator(nil) }, "idem: WithKeyGenerator: gen must not be nil"},
		{"OnDone nil", func() { WithOnDone(nil) }, "idem: WithOnDone: fn must not be nil"},
		{"RetryIf nil", func() { WithRetryIf(nil) }, "idem: WithRetryIf: fn must not be nil"},
		{"OnRetry nil", func() { WithOnRetry(nil) }, "idem: WithOnRetry: fn must not be nil"},
		{"BodyBufferLimit negative", func() { WithBodyBufferLimit(-1) }, "idem: WithBodyBufferLimit: n must not be negative"},
		{"Logger nil", func() { WithLogger(nil) }, "idem: WithLogger: l must not be nil"},
		{"nil Option", func() { NewTransport(nil, nil) }, "idem: NewTransport: nil Option"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				r := recover()
				msg, _ := r.(string)
				if !strings.HasPrefix(msg, tt.want) {
					t.Errorf("panic %v, want a message starting %q", r, tt.want)
				}
			}()
			tt.make()
		})
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	tr := NewTransport(nil)
	if tr.transport() != http.DefaultTransport {
		t.Error("nil next is not http.DefaultTransport")
	}
	c := tr.cfg
	if zero := new(Transport).policy(); zero.maxAttempts != c.maxAttempts || zero.maxElapsed != c.maxElapsed ||
		zero.base != c.base || zero.max != c.max || !zero.autoKeys || zero.bodyLimit != c.bodyLimit {
		t.Errorf("a zero Transport's policy %+v is not NewTransport(nil)'s", zero)
	}
	if c.maxAttempts != 7 || c.base != 300*time.Millisecond || c.max != 10*time.Second ||
		c.jitter != FullJitter || c.maxElapsed != 30*time.Second || c.attemptTimeout != 0 ||
		c.maxRetryAfter != 30*time.Second || !c.autoKeys || c.quotedKeys ||
		c.budget != nil || c.budgetSet || c.onRetry != nil || c.retryIf != nil || c.bodyLimit != 1<<20 || c.logger != nil {
		t.Errorf("defaults: %+v", c)
	}
	if u, err := uuid.Parse(c.keyGen()); err != nil || u.Version() != 4 {
		t.Errorf("the default key is not a UUIDv4: %v %v", u, err)
	}
}

func TestNewClient(t *testing.T) {
	t.Parallel()
	c := NewClient(WithMaxAttempts(2))
	tr, ok := c.Transport.(*Transport)
	if !ok {
		t.Fatalf("Transport is %T", c.Transport)
	}
	if tr.cfg.maxAttempts != 2 || tr.transport() != http.DefaultTransport {
		t.Errorf("NewClient transport: %+v", tr.cfg)
	}
}

// TestZeroTransport: a zero Transport works, with the defaults over
// http.DefaultTransport: a POST gets a generated key and a 503 is retried.
func TestZeroTransport(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	var keys sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys.Store(r.Header.Get(headerKeyName), true)
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	var tr Transport
	resp, err := tr.RoundTrip(mustRequest(t, context.Background(), http.MethodPost, srv.URL, "{}"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || n.Load() != 2 {
		t.Fatalf("status %d after %d attempts", resp.StatusCode, n.Load())
	}
	count := 0
	keys.Range(func(k, _ any) bool {
		if _, err := uuid.Parse(k.(string)); err != nil {
			t.Errorf("key %q is not a UUID", k)
		}
		count++
		return true
	})
	if count != 1 {
		t.Errorf("%d distinct keys, want 1", count)
	}
}
