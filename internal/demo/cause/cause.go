// Package cause carries, in a request's context, where the demo reports the
// cause of an error answer whose body does not say it (a ledger that failed,
// a store that did not answer its Ping), so that idem-server's request log
// names the cause of every 503.
package cause

import "context"

type key struct{}

// With returns ctx with report, which Report calls.
func With(ctx context.Context, report func(error)) context.Context {
	return context.WithValue(ctx, key{}, report)
}

// Report passes err to the function With put in ctx, if any.
func Report(ctx context.Context, err error) {
	if f, ok := ctx.Value(key{}).(func(error)); ok && err != nil {
		f(err)
	}
}
