package idemtest

import (
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/chaos"
)

// An Option configures a Server. An invalid option panics when it is created,
// with the message the package documentation describes.
type Option func(*config)

type config struct {
	store     server.Store
	mwOpts    []server.Option
	chaosOpts []chaos.Option
}

// WithStore serves over store instead of a fresh memstore.Store. The Server
// does not close it.
func WithStore(store server.Store) Option {
	if store == nil {
		panic("idemtest: WithStore(nil): want a server.Store")
	}
	return func(c *config) { c.store = store }
}

// WithMiddlewareOptions adds options to the server.Middleware of POST
// /payments, after the default server.WithScope(server.BearerScope).
func WithMiddlewareOptions(opts ...server.Option) Option {
	return func(c *config) { c.mwOpts = append(c.mwOpts, opts...) }
}

// WithChaos adds fault injection options, such as random fail, drop and delay
// rates for soak tests (chaos.WithFailRate, chaos.WithDropRate,
// chaos.WithDelayMax, chaos.WithRand). The Chaos-* headers are always on; a
// chaos option with an impossible setting panics when it is created, and a nil
// one makes NewServer panic.
func WithChaos(opts ...chaos.Option) Option {
	return func(c *config) { c.chaosOpts = append(c.chaosOpts, opts...) }
}
