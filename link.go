package idem

import (
	"context"
	"time"

	"github.com/idemkit/idem/internal/clientlink"
	"github.com/idemkit/idem/internal/retry"
)

// The drivers of other modules (idem/grpc) take this package's Options,
// Budgets and hooks through internal/clientlink.
func init() {
	clientlink.Resolve = resolvePolicy
	clientlink.KeyFromContext = keyFromContext
}

// resolvePolicy is clientlink.Resolve: the Policy of opts, a []Option.
func resolvePolicy(caller string, opts any) clientlink.Policy {
	cfg := defaultConfig()
	for _, opt := range opts.([]Option) {
		if opt == nil {
			badArg(caller+"(nil Option)", "an Option")
		}
		opt(&cfg)
	}
	p := clientlink.Policy{
		Bounds: cfg.bounds, Backoff: cfg.backoff, AutoKeys: cfg.autoKeys, NewKey: cfg.keyGen, Logger: cfg.logger,
		Limit: budgetLimit{newTransportBudget()},
		AttemptContext: func(ctx context.Context, a retry.Attempt, key string) context.Context {
			return &attemptContext{Context: ctx, info: attemptInfo(a, key)}
		},
	}
	switch {
	case cfg.budgetSet && cfg.budget == nil:
		p.Limit = retry.NoLimit
	case cfg.budgetSet:
		p.Limit = budgetLimit{cfg.budget}
	}
	if fn := cfg.retryIf; fn != nil {
		p.Judge = func(err error, keyed, fresh bool, out retry.Outcome) retry.Outcome {
			table, _ := retry.TableReason(keyed, fresh, out)
			switch again := fn(nil, err, table != ""); {
			case again && table == "":
				out.Custom = 1
			case !again && table != "":
				out.Custom = -1
			}
			return out
		}
	}
	if fn := cfg.onRetry; fn != nil {
		p.Retrying = func(ctx context.Context, n retry.Notice, key string) { fn(ctx, attemptInfo(n.Next, key)) }
	}
	if len(cfg.onDone) > 0 {
		p.Done = func(ctx context.Context, d clientlink.Done) {
			r := Report{Method: d.Method, Host: d.Host, Key: d.Key, Attempts: d.Record.Attempts, Polls: d.Record.Polls,
				Skipped: d.Record.Skipped, Err: d.Err, Elapsed: time.Since(d.Start), Stop: d.Stop,
				BudgetRefused: d.Record.BudgetRefused, HostHold: d.Record.HostHold}
			for _, fn := range cfg.onDone {
				fn(ctx, r)
			}
		}
	}
	return p
}
