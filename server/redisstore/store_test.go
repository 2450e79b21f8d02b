package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/server"
)

func TestDoExecutesOnceThenReplays(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	calls := 0
	want := response(201, "created\n")
	want.Header["Location"] = []string{"/payments/1"}

	first := mustDo(t, s, req("k1", "fp"), respond(&calls, want))
	if first.Outcome != server.OutcomeExecuted || first.Response != want {
		t.Fatalf("first = %+v, want executed with the handler's response", first)
	}
	for i := range 3 {
		got := mustDo(t, s, req("k1", "fp"), neverRun(t))
		if got.Outcome != server.OutcomeReplayed {
			t.Fatalf("replay %d outcome = %v, want replayed", i, got.Outcome)
		}
		if !reflect.DeepEqual(got.Response, want) {
			t.Fatalf("replay %d = %+v, want %+v", i, got.Response, want)
		}
	}
	if calls != 1 {
		t.Fatalf("handler ran %d times, want 1", calls)
	}
}

func TestDoMismatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		finished bool // the first request finished (else it is still in progress)
	}{
		{"against a finished record", true},
		{"against an in-progress claim", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, c := newTestStore(t)
			release, done := make(chan struct{}), make(chan server.Result, 1)
			started := make(chan struct{})
			go func() {
				res, err := s.Do(context.Background(), req("k", "fp-a"), func(context.Context) (*server.Response, bool) {
					close(started)
					if !tt.finished {
						<-release
					}
					return response(200, "a"), true
				})
				if err != nil {
					t.Errorf("first Do: %v", err)
				}
				done <- res
			}()
			<-started
			if tt.finished {
				<-done
			}
			before := c.Get(context.Background(), s.key("tenant-a", "k")).Val()

			got := mustDo(t, s, req("k", "fp-b"), neverRun(t))
			if got.Outcome != server.OutcomeMismatch || got.Response != nil {
				t.Fatalf("got %+v, want mismatch with no response", got)
			}
			if after := c.Get(context.Background(), s.key("tenant-a", "k")).Val(); after != before {
				t.Fatal("a mismatch changed the stored value")
			}
			close(release)
			if !tt.finished {
				<-done
			}
			if got := mustDo(t, s, req("k", "fp-a"), neverRun(t)); got.Outcome != server.OutcomeReplayed {
				t.Fatalf("original request afterwards: %v, want replayed", got.Outcome)
			}
		})
	}
}

func TestDoInProgressRetryAfterFromPTTL(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	r := req("k", "fp")
	r.LockTTL = 20 * time.Second
	started, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := s.Do(context.Background(), r, func(context.Context) (*server.Response, bool) {
			close(started)
			<-release
			return response(200, "ok"), true
		})
		done <- err
	}()
	<-started
	got := mustDo(t, s, r, neverRun(t))
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("first Do: %v", err)
	}
	if got.Outcome != server.OutcomeInProgress || got.Response != nil {
		t.Fatalf("got %+v, want in-progress", got)
	}
	// The claim was set moments ago with PX 20s: its PTTL is close to that.
	if got.RetryAfter <= r.LockTTL/2 || got.RetryAfter > r.LockTTL {
		t.Fatalf("RetryAfter = %v, want in (%v, %v]", got.RetryAfter, r.LockTTL/2, r.LockTTL)
	}
}

func TestDoReleasesClaimWhenNotKept(t *testing.T) {
	t.Parallel()
	s, c := newTestStore(t)
	calls := 0
	run := func(context.Context) (*server.Response, bool) {
		calls++
		return response(503, "try later"), false
	}
	for i := range 2 {
		got := mustDo(t, s, req("k", "fp"), run)
		if got.Outcome != server.OutcomeExecuted || got.Response.Status != 503 {
			t.Fatalf("attempt %d = %+v, want executed 503", i, got)
		}
		if n := c.Exists(context.Background(), s.key("tenant-a", "k")).Val(); n != 0 {
			t.Fatalf("attempt %d left the key in Redis", i)
		}
	}
	if calls != 2 {
		t.Fatalf("handler ran %d times, want 2 (released each time)", calls)
	}
}

func TestDoPanicReleasesAndRepanics(t *testing.T) {
	t.Parallel()
	s, c := newTestStore(t)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the handler's panic", r)
			}
		}()
		_, _ = s.Do(context.Background(), req("k", "fp"), func(context.Context) (*server.Response, bool) { panic("boom") })
		t.Fatal("Do returned, want the panic to go on")
	}()
	if n := c.Exists(context.Background(), s.key("tenant-a", "k")).Val(); n != 0 {
		t.Fatal("the claim is still in Redis after the panic")
	}
	calls := 0
	if got := mustDo(t, s, req("k", "fp"), respond(&calls, response(200, "ok"))); got.Outcome != server.OutcomeExecuted {
		t.Fatalf("retry after panic: %v, want executed", got.Outcome)
	}
}

func TestDoScopesAreIsolated(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	scopes := []string{"", "tenant-a", "tenant-b", "tenant-a:x", "a\x00b", "ünïcode"}
	for _, scope := range scopes {
		r := req("shared-key", "fp")
		r.Scope = scope
		calls := 0
		got := mustDo(t, s, r, respond(&calls, response(200, "scope="+scope)))
		if got.Outcome != server.OutcomeExecuted {
			t.Fatalf("scope %q: %v, want executed (no other scope's record visible)", scope, got.Outcome)
		}
	}
	for _, scope := range scopes {
		r := req("shared-key", "fp")
		r.Scope = scope
		got := mustDo(t, s, r, neverRun(t))
		if got.Outcome != server.OutcomeReplayed || string(got.Response.Body) != "scope="+scope {
			t.Fatalf("scope %q replayed %+v", scope, got)
		}
	}
}

func TestDoClientGoneStillRecords(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	res, err := s.Do(ctx, req("k", "fp"), func(hctx context.Context) (*server.Response, bool) {
		cancel() // the client disconnects while the handler runs
		<-hctx.Done()
		return response(201, "done"), true
	})
	if err != nil || res.Outcome != server.OutcomeExecuted {
		t.Fatalf("Do = %+v, %v; want executed", res, err)
	}
	if got := mustDo(t, s, req("k", "fp"), neverRun(t)); got.Outcome != server.OutcomeReplayed {
		t.Fatalf("after disconnect: %v, want the response recorded and replayed", got.Outcome)
	}
}

func TestDoRejectsBadStoredValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value string
		want  error
	}{
		{"unknown version", "\x02r\x02fp", ErrUnknownVersion},
		{"unknown kind", "\x01x", ErrCorruptRecord},
		{"truncated record", string(encodeRecord("fp", response(200, "body")))[:9], ErrCorruptRecord},
		{"trailing bytes", string(encodeRecord("fp", response(200, "body"))) + "x", ErrCorruptRecord},
		{"not ours at all", "hello", ErrUnknownVersion},
		{"too short", "\x01", ErrCorruptRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, c := newTestStore(t)
			key := s.key("tenant-a", "k")
			if err := c.Set(context.Background(), key, tt.value, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			_, err := s.Do(context.Background(), req("k", "fp"), neverRun(t))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Do error = %v, want %v", err, tt.want)
			}
			if got := c.Get(context.Background(), key).Val(); got != tt.value {
				t.Fatal("Do changed a value it could not read")
			}
		})
	}
}

func TestDoRejectsInvalidRequests(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	tests := []struct {
		name   string
		mutate func(*server.Request)
	}{
		{"empty key", func(r *server.Request) { r.Key = "" }},
		{"zero TTL", func(r *server.Request) { r.TTL = 0 }},
		{"negative LockTTL", func(r *server.Request) { r.LockTTL = -time.Second }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := req("k", "fp")
			tt.mutate(&r)
			if _, err := s.Do(context.Background(), r, neverRun(t)); !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("err = %v, want ErrInvalidRequest", err)
			}
		})
	}
}

func TestDoUnreachableRedisFailsClosed(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: the claim fails and run is never called.
	c := redis.NewClient(&redis.Options{Addr: freeAddr(t), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	s := New(c)
	_, err := s.Do(context.Background(), req("k", "fp"), neverRun(t))
	if err == nil || isNotRecorded(err) {
		t.Fatalf("err = %v, want a store error that is not ErrNotRecorded (run never started)", err)
	}
}

func TestKeyEncoding(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	s := New(c, WithPrefix("p:"))
	sum := sha256.Sum256([]byte("t1"))
	if got, want := s.key("t1", "k"), "p:"+hex.EncodeToString(sum[:])+":k"; got != want {
		t.Fatalf("key = %q, want %q", got, want)
	}
	if s.key("t1", "k") == s.key("t1:k", "") || s.key("a", "b") == s.key("", "b") {
		t.Fatal("distinct (scope, key) pairs share a Redis key")
	}
}
