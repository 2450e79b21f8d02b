package redisstore

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
)

// withKind returns a copy of the value v with kind byte k.
func withKind(v []byte, k byte) []byte {
	out := append([]byte(nil), v...)
	out[1] = k
	return out
}

// A marked claim whose owner is gone (its lease past its deadline, a
// claimant's suspect mark older than the grace) is never taken over: the
// claimant gets OutcomeUnknown, the value becomes outcome-unknown for the
// key's TTL, every later request with the same fingerprint gets the same,
// and the old owner can no longer record over it.
func TestMarkedClaimOfAGoneOwnerIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	s, c := newTestStore(t)
	ctx := context.Background()
	key := s.key("tenant-a", "k")
	owner := withKind(encodeLeasedClaim([tokenLen]byte{7}, "0000000000001", "0000000000001", "fp"), kindMarked)
	if err := c.Set(ctx, key, owner, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	r := req("k", "fp")
	for i := range 2 {
		if res := mustDo(t, s, r, neverRun(t)); res.Outcome != server.OutcomeUnknown {
			t.Fatalf("request %d: %v, want outcome-unknown", i, res.Outcome)
		}
	}
	v, err := c.Get(ctx, key).Bytes()
	if err != nil || v[1] != kindUnknown || string(v[2:]) != string(owner[2:]) {
		t.Fatalf("stored value %q, %v; want the owner's claim as kind %q", v, err, kindUnknown)
	}
	if ttl := c.PTTL(ctx, key).Val(); ttl <= time.Minute || ttl > claimKeyTTL(r) {
		t.Errorf("the key lives %v more, want the key's TTL again (%v)", ttl, claimKeyTTL(r))
	}
	if res := mustDo(t, s, req("k", "another"), neverRun(t)); res.Outcome != server.OutcomeMismatch {
		t.Errorf("another fingerprint: %v, want a mismatch", res.Outcome)
	}
	n, err := finishScript.Run(ctx, c, []string{key}, owner, encodeRecord("fp", response(201, "late")), 60000).Int64()
	if err != nil || n != 0 {
		t.Fatalf("the gone owner's finish: %d, %v; want 0 (the key is no longer its claim)", n, err)
	}
}

// The same claim unmarked is taken over: the claimant runs (the crash
// window the mark closes).
func TestUnmarkedClaimOfAGoneOwnerIsTakenOver(t *testing.T) {
	t.Parallel()
	s, c := newTestStore(t)
	key := s.key("tenant-a", "k")
	owner := encodeLeasedClaim([tokenLen]byte{7}, "0000000000001", "0000000000001", "fp")
	if err := c.Set(context.Background(), key, owner, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	calls := 0
	if res := mustDo(t, s, req("k", "fp"), respond(&calls, response(201, "again"))); res.Outcome != server.OutcomeExecuted || calls != 1 {
		t.Fatalf("%v after %d runs, want executed", res.Outcome, calls)
	}
}

// markScript marks the caller's claim only; renewals keep the mark; a
// release clears it with the claim.
func TestMarkScript(t *testing.T) {
	t.Parallel()
	s, c := newTestStore(t)
	ctx := context.Background()
	key := s.key("tenant-a", "k")
	r := req("k", "fp")
	claim := encodeClaim([tokenLen]byte{1}, "fp")
	if n, err := claimScript.Run(ctx, c, []string{key}, claim, millis(r.LockTTL), millis(claimKeyTTL(r)),
		millis(grace(r.LockTTL))).Int64(); err != nil || n != 1 {
		t.Fatalf("claim: %d, %v", n, err)
	}
	if err := s.mark(ctx, key, encodeClaim([tokenLen]byte{2}, "fp")); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("another owner's mark: %v, want ErrLeaseLost", err)
	}
	if c.Get(ctx, key).Val()[1] != kindClaim {
		t.Fatal("another owner's mark changed the claim")
	}
	for range 2 { // marking twice is harmless
		if err := s.mark(ctx, key, claim); err != nil {
			t.Fatalf("mark: %v", err)
		}
	}
	before := c.Get(ctx, key).Val()
	if n, err := renewScript.Run(ctx, c, []string{key}, claim, millis(r.LockTTL), millis(claimKeyTTL(r))).Int64(); err != nil || n != 1 {
		t.Fatalf("renew of the marked claim: %d, %v", n, err)
	}
	after := c.Get(ctx, key).Val()
	if before[1] != kindMarked || after[1] != kindMarked || after[44:] != before[44:] {
		t.Fatalf("marked %q, renewed %q: want the mark and the fingerprint kept", before, after)
	}
	if n, err := s.releaseN(ctx, key, claim); err != nil || n != releaseDeleted {
		t.Fatalf("release of the marked claim: %d, %v", n, err)
	}
}

// Through the middleware: BeginEffect marks the claim in Redis before it
// returns, and a record replaces the mark.
func TestBeginEffectMarksTheClaim(t *testing.T) {
	t.Parallel()
	s, c := newTestStore(t)
	key := s.key("", "k1")
	var seen string
	h := server.Middleware(s)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := server.BeginEffect(r.Context()); err != nil {
			t.Errorf("BeginEffect: %v", err)
		}
		seen = c.Get(r.Context(), key).Val()
		w.WriteHeader(http.StatusAccepted)
	}))
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/fwd", strings.NewReader(`{}`))
	req.Header.Set(server.HeaderKey, "k1")
	h.ServeHTTP(rec, req)
	if len(seen) < 2 || seen[1] != kindMarked {
		t.Fatalf("the claim while the handler ran: %q, want kind %q", seen, kindMarked)
	}
	if v := c.Get(context.Background(), key).Val(); len(v) < 2 || v[1] != kindRecord {
		t.Fatalf("after the answer: %q, want the record", v)
	}
}

// With WithMinReplicas and no replica to acknowledge the mark, BeginEffect
// fails (the effect must not start). The claim itself needs the replicas too,
// so the mark's WAIT is reached through a claim made without them.
func TestMarkWaitsForTheReplicas(t *testing.T) {
	t.Parallel()
	c := sharedRedis(t)
	if n := c.Wait(context.Background(), 1, time.Millisecond).Val(); n != 0 {
		t.Skipf("the test Redis has %d replicas; this test needs one without", n)
	}
	prefix := testPrefix(t, c)
	plain := New(c, WithPrefix(prefix))
	waiting := New(c, WithPrefix(prefix), WithMinReplicas(1, 50*time.Millisecond))
	ctx := context.Background()
	key := plain.key("tenant-a", "k")
	claim := encodeClaim([tokenLen]byte{3}, "fp")
	r := req("k", "fp")
	if n, err := claimScript.Run(ctx, c, []string{key}, claim, millis(r.LockTTL), millis(claimKeyTTL(r)),
		millis(grace(r.LockTTL))).Int64(); err != nil || n != 1 {
		t.Fatalf("claim: %d, %v", n, err)
	}
	if err := waiting.mark(ctx, key, claim); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("mark with no replica: %v, want ErrNotReplicated", err)
	}
}

// With a replica that acknowledges, the mark is WAITed for and stands on the
// replica before BeginEffect returns.
func TestMarkAcknowledgedByTheReplica(t *testing.T) {
	t.Parallel()
	master := startPrivateRedis(t)
	replica := startPrivateRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.port))
	c := master.client(t)
	deadline := time.Now().Add(20 * time.Second)
	for c.Wait(context.Background(), 1, 100*time.Millisecond).Val() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the private replica never synchronised")
		}
	}
	s := New(c, WithMinReplicas(1, 2*time.Second))
	key := s.key("", "k1")
	var onReplica string
	h := server.Middleware(s)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := server.BeginEffect(r.Context()); err != nil {
			t.Errorf("BeginEffect: %v", err)
		}
		onReplica = replica.client(t).Get(r.Context(), key).Val()
		w.WriteHeader(http.StatusAccepted)
	}))
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/fwd", strings.NewReader(`{}`))
	req.Header.Set(server.HeaderKey, "k1")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusAccepted || len(onReplica) < 2 || onReplica[1] != kindMarked {
		t.Fatalf("answer %d; the replica held %q while the handler ran, want the marked claim", rec.Code, onReplica)
	}
}
