package idem

import (
	"context"
	"net/http"
	"net/http/httptest"
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
		{"MaxAttempts 0", func() { WithMaxAttempts(0) }, "idem: WithMaxAttempts(0): want n >= 1"},
		{"MaxAttempts -1", func() { WithMaxAttempts(-1) }, "idem: WithMaxAttempts(-1): want n >= 1"},
		{"Backoff negative", func() { WithBackoff(-1, time.Second) }, "idem: WithBackoff(-1ns, 1s): want base and max >= 0"},
		{"Backoff base > max", func() { WithBackoff(2*time.Second, time.Second) }, "idem: WithBackoff(2s, 1s): want base <= max"},
		{"Jitter invalid", func() { WithJitter(Jitter(9)) }, "idem: WithJitter(9): want one of the Jitter constants"},
		{"MaxElapsed 0", func() { WithMaxElapsed(0) }, "idem: WithMaxElapsed(0s): want a positive duration"},
		{"AttemptTimeout negative", func() { WithAttemptTimeout(-time.Second) }, "idem: WithAttemptTimeout(-1s): want a duration >= 0"},
		{"MaxRetryAfter negative", func() { WithMaxRetryAfter(-1) }, "idem: WithMaxRetryAfter(-1ns): want a duration >= 0"},
		{"KeyGenerator nil", func() { WithKeyGenerator(nil) }, "idem: WithKeyGenerator(nil): want a function"},
		{"OnDone nil", func() { WithOnDone(nil) }, "idem: WithOnDone(nil): want a function"},
		{"RetryIf nil", func() { WithRetryIf(nil) }, "idem: WithRetryIf(nil): want a function"},
		{"OnRetry nil", func() { WithOnRetry(nil) }, "idem: WithOnRetry(nil): want a function"},
		{"BodyBufferLimit negative", func() { WithBodyBufferLimit(-1) }, "idem: WithBodyBufferLimit(-1): want n >= 0"},
		{"Logger nil", func() { WithLogger(nil) }, "idem: WithLogger(nil): want a *slog.Logger"},
		{"nil Option", func() { NewTransport(nil, nil) }, "idem: NewTransport(nil Option): want an Option"},
		{"NewClient nil Option", func() { NewClient(nil) }, "idem: NewTransport(nil Option): want an Option"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				if r := recover(); r != tt.want {
					t.Errorf("panic %#v, want %q", r, tt.want)
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
	if zero := new(Transport).policy(); zero.bounds.MaxAttempts != c.bounds.MaxAttempts || zero.bounds.MaxElapsed != c.bounds.MaxElapsed ||
		zero.backoff.Base != c.backoff.Base || zero.backoff.Max != c.backoff.Max || !zero.autoKeys || zero.bodyLimit != c.bodyLimit {
		t.Errorf("a zero Transport's policy %+v is not NewTransport(nil)'s", zero)
	}
	if c.bounds.MaxAttempts != 7 || c.backoff.Base != 300*time.Millisecond || c.backoff.Max != 10*time.Second ||
		c.backoff.Jitter != FullJitter.kind() || c.bounds.MaxElapsed != 30*time.Second || c.bounds.AttemptTimeout != 0 ||
		c.bounds.MaxRetryAfter != 30*time.Second || !c.autoKeys || c.quotedKeys ||
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
	if tr.cfg.bounds.MaxAttempts != 2 || tr.transport() != http.DefaultTransport {
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
