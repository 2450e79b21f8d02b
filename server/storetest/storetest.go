// Package storetest is the contract suite every server.Store runs: the
// scenarios of CONTRACT.md sections 3 and 4, played over a real HTTP server
// through server.Middleware and a small handler of the suite's own, counting
// the handler's effects (Effects) to prove that each logical operation
// happened at most once. It depends on nothing but package server.
//
// A store's test calls Run with a function that builds a fresh Fixture for each
// scenario:
//
//	func TestContract(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Fixture {
//			clock := newFakeClock()
//			return storetest.Fixture{Store: memstore.New(memstore.WithClock(clock.Now)), Advance: clock.Advance}
//		})
//	}
//
// A store passes only if it implements Request.Wait: a duplicate waits for
// the owner without holding what the owner needs, replays when the owner
// records, claims and runs when the owner releases (5xx, panic), stops when
// its context ends, and answers in progress at once when Wait is zero, with a
// RetryAfter no longer than the lease; and it reports how long it waited
// (Result.Waited) whatever ended the wait.
//
// A store that makes durable effect marks (server.BeginEffect,
// server.ContextWithEffectMark) gives the fixture an OwnerGone hook: the
// owner-gone scenarios then prove that a marked claim whose owner crashed is
// answered outcome-unknown, never run again, while an unmarked one is run
// again (the crash window the mark closes). Without the hook they are skipped.
//
// The scenarios synchronise with channels and the fixture's Advance; only the
// lock-TTL scenario waits on real time (a few hundred milliseconds), because
// real time is what it is about, the owner-gone scenarios wait for a store
// whose claims expire to see the owner gone (Redis: a 500 ms lease and its
// 1 s grace), and the wait scenarios, once a duplicate holds its turn to wait
// (server.WaitTurn, which every store must call before it waits), watch 100 ms
// for it answered too early (which a correct store never is).
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
)

// Fixture is one isolated store under test.
type Fixture struct {
	// Store is the store under test. Required.
	Store server.Store
	// Advance moves the store's notion of time forward by d (record expiry
	// tests). Required.
	Advance func(d time.Duration)
	// Effects records the handler's business writes; nil means a map in
	// memory.
	Effects Effects
	// Transactional reports that an Effects write and the store's record commit or
	// roll back together (PostgreSQL): a panic after the business write then
	// leaves no effect.
	Transactional bool
	// BreakRecord, when set, makes the store unable to record the response of
	// the request in progress (a Redis server stopped, a PostgreSQL backend
	// terminated) and returns a function that repairs it. The suite calls it
	// from inside the handler, after the business write; the scenario
	// outcome_unknown is skipped without it.
	BreakRecord func(t *testing.T) (repair func())
	// OwnerGone, when set, makes the owner of the claim in progress gone, as a
	// crash of its process would: the suite calls it from inside the handler,
	// after the effect (and server.BeginEffect, in effect_mark_owner_gone),
	// with the handler's context (which carries the store's state: pgstore's
	// transaction). It returns once nothing the owner does can change the
	// records any more and the store will see the owner gone without its help
	// (PostgreSQL: the transaction's connection killed; Redis: the store cut
	// off from Redis, its lease left to lapse past the grace), and returns the
	// Store the retries use: the same one when it still works, or another over
	// the same records, standing for the restarted process. The handler that
	// called it never returns before the scenario ends. The owner-gone
	// scenarios are skipped without it; a store that makes no durable effect
	// mark (memstore) has none to give.
	OwnerGone func(t *testing.T, ctx context.Context) (survivor server.Store)
}

// Scenario names, the subtests Run runs (in this order).
const (
	ScenarioReplay       = "replay"
	ScenarioMismatch     = "mismatch"
	ScenarioKeys         = "keys"
	ScenarioConcurrent   = "concurrent_duplicates"
	ScenarioInProgress   = "in_progress"
	ScenarioExpiry       = "expiry"
	ScenarioServerError  = "5xx_not_stored"
	ScenarioPanic        = "panic_after_write"
	ScenarioSlowHandler  = "slow_handler_beyond_lock_ttl"
	ScenarioScopes       = "scopes"
	ScenarioDisconnect   = "client_disconnect"
	ScenarioBodyTooLarge = "body_too_large"
	// Request.Wait: a duplicate waits for the first request.
	ScenarioWaitLateAnswer    = "wait_late_answer"
	ScenarioWaitOriginalFails = "wait_original_fails"
	ScenarioWaitClientGone    = "wait_client_gone"
	ScenarioConcurrentWait    = "concurrent_duplicates_wait"
	// A duplicate waits only with a turn of the process's Limits
	// (server.WaitTurn, server.LimitWaiting); past them it is answered 409 at
	// once.
	ScenarioWaitTurn = "wait_takes_a_turn"
	// A flood of waiting duplicates of one tenant leaves other tenants alone.
	ScenarioDuplicateFlood = "duplicate_flood"
	// A store that cannot record after the handler's effect.
	ScenarioOutcomeUnknown = "outcome_unknown"
	// A handler that declared its effect (server.DeclareEffect), then failed.
	ScenarioDeclared5xx   = "declared_effect_then_5xx"
	ScenarioDeclaredPanic = "declared_effect_then_panic"
	// A handler that began its effect (server.BeginEffect): the store's
	// durable mark is replaced by the record, cleared with a release after
	// CancelEffect, answered in progress while its owner lives, and, once the
	// owner is gone, answered outcome-unknown, never run again (the unmarked
	// control runs again: the crash window the mark closes).
	ScenarioMarkRecord        = "effect_mark_then_record"
	ScenarioMarkCancelled     = "effect_mark_cancelled_then_5xx"
	ScenarioMarkDuplicate     = "effect_mark_duplicate_in_progress"
	ScenarioMarkOwnerGone     = "effect_mark_owner_gone"
	ScenarioUnmarkedOwnerGone = "effect_unmarked_owner_gone"
)

type scenario struct {
	name string
	run  func(t *testing.T, f Fixture)
}

var scenarios = []scenario{
	{ScenarioReplay, testReplay},
	{ScenarioMismatch, testMismatch},
	{ScenarioKeys, testKeys},
	{ScenarioConcurrent, testConcurrent},
	{ScenarioInProgress, testInProgress},
	{ScenarioExpiry, testExpiry},
	{ScenarioServerError, testServerError},
	{ScenarioPanic, testPanic},
	{ScenarioSlowHandler, testSlowHandler},
	{ScenarioScopes, testScopes},
	{ScenarioDisconnect, testDisconnect},
	{ScenarioBodyTooLarge, testBodyTooLarge},
	{ScenarioWaitLateAnswer, testWaitLateAnswer},
	{ScenarioWaitOriginalFails, testWaitOriginalFails},
	{ScenarioWaitClientGone, testWaitClientGone},
	{ScenarioConcurrentWait, testConcurrentWait},
	{ScenarioWaitTurn, testWaitTurn},
	{ScenarioDuplicateFlood, testDuplicateFlood},
	{ScenarioOutcomeUnknown, testOutcomeUnknown},
	{ScenarioDeclared5xx, testDeclared5xx},
	{ScenarioDeclaredPanic, testDeclaredPanic},
	{ScenarioMarkRecord, testMarkThenRecord},
	{ScenarioMarkCancelled, testMarkCancelled},
	{ScenarioMarkDuplicate, testMarkDuplicate},
	{ScenarioMarkOwnerGone, testMarkOwnerGone},
	{ScenarioUnmarkedOwnerGone, testUnmarkedOwnerGone},
}

// Run runs every scenario of CONTRACT.md sections 3 and 4 as a subtest, each
// against a fresh fixture from newFixture (called once per subtest, so stores
// can isolate with their own table or key prefix), through the real
// server.Middleware and the suite's handler. Subtests run one after another, so a
// fixture may share a clock or a database across calls.
func Run(t *testing.T, newFixture func(t *testing.T) Fixture) {
	t.Helper()
	if newFixture == nil {
		t.Fatal("storetest.Run: nil newFixture")
	}
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			f := newFixture(t)
			if f.Store == nil || f.Advance == nil {
				t.Fatal("storetest: Fixture.Store and Fixture.Advance are required")
			}
			if f.Effects == nil {
				f.Effects = newMemEffects()
			}
			s.run(t, f)
		})
	}
}
