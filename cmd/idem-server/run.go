package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/idemkit/idem/cmd/idem-server/gateway"
	"github.com/idemkit/idem/internal/demo"
	"github.com/idemkit/idem/server/chaos"
)

// crashExitCode is the exit status of a Chaos-Crash.
const crashExitCode = 3

// cancelGrace bounds each step of a shutdown after the drain: the handlers'
// return once their contexts are cancelled (their stores roll back or release
// their claims on contexts of their own, within pgstore's 5s finish timeout),
// then the stores' close.
const cancelGrace = 5 * time.Second

// errShuttingDown is the cause of the contexts of the requests still running
// when the drain ends.
var errShuttingDown = errors.New("idem-server: shutting down")

// run parses args, serves until ctx is done, then shuts down gracefully (see
// shutdown).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if cfg.version {
		fmt.Fprintln(stdout, "idem-server", buildVersion())
		return nil
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	if w := cfg.ladderWarning(); w != "" {
		logger.Warn(w)
	}
	scope, err := scopeFunc(cfg)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	lim := newLimits(cfg)

	tel, err := newTelemetry(ctx)
	if err != nil {
		return err
	}
	store, ledger, cleanup, err := openStore(ctx, cfg, logger, tel)
	if err != nil {
		_ = tel.close(context.Background())
		return err
	}
	cleanup = tel.closeAfter(cleanup, logger)
	serving := false
	defer func() {
		if !serving { // shutdown closes the stores, in bounded time
			cleanup()
		}
	}()

	inj := chaos.New(
		chaos.WithHeaders(cfg.chaos),
		chaos.WithFailRate(cfg.chaosFailRate),
		chaos.WithDropRate(cfg.chaosDropRate),
		chaos.WithDelayMax(cfg.chaosDelayMax),
		chaos.WithCrash(func() {
			logger.Warn("chaos: crashing after the business write", "exit_code", crashExitCode)
			os.Exit(crashExitCode)
		}),
	)
	tel.observeLimits(lim)
	mwOpts := middlewareOptions(cfg, tel, scope, lim)
	var h http.Handler
	metricsPath := "/metrics"
	if cfg.gateway.enabled() {
		h, metricsPath = newGateway(cfg.gateway, store, inj, cfg.chaos, scope, mwOpts...), gateway.MetricsPath
	} else {
		h = demo.New(demo.Config{Store: store, Ledger: ledger, Faults: inj, Scope: scope, Options: mwOpts})
	}

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	// Every request's context derives from base, which shutdown cancels.
	base, cancelBase := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelBase(nil)
	var flight inFlight
	srv := &http.Server{
		Handler:           flight.track(logRequests(logger, tel.handler(h, metricsPath))),
		BaseContext:       func(net.Listener) context.Context { return base },
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      chaos.MaxDelay + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	serving = true
	go func() { served <- srv.Serve(ln) }()
	logger.Info("listening", "addr", ln.Addr().String(), "store", cfg.store, "chaos", cfg.chaos, "upstream", cfg.gateway.upstreamRaw)
	fmt.Fprintf(stdout, "idem-server listening on http://%s\n", ln.Addr())

	select {
	case err := <-served:
		cleanup()
		return err
	case <-ctx.Done():
	}
	return shutdown(srv, served, &flight, cancelBase, cleanup, drainTime(cfg), logger)
}

// drainTime is how long a shutdown lets requests in flight finish:
// -shutdown-timeout, at most -lock-ttl, past which a store that does not renew
// its claims would let another instance run the same key.
func drainTime(cfg config) time.Duration { return min(cfg.shutdownTimeout, cfg.lockTTL) }

// shutdown stops the server in four bounded steps:
//
//  1. stop accepting and let the requests in flight finish, for up to drain;
//  2. cancel the contexts of those still running, so that their handlers return
//     and their stores roll back or release their claims (a retry then runs the
//     handler once, with no orphaned claim answering 409), and wait for them
//     for up to cancelGrace;
//  3. close the remaining connections;
//  4. close the stores (pool.Close waits for connections still in use), for up
//     to cancelGrace; past it the process exits anyway, and PostgreSQL rolls
//     back the transactions of the connections that die with it.
func shutdown(srv *http.Server, served <-chan error, flight *inFlight, cancelBase context.CancelCauseFunc,
	closeStores func(), drain time.Duration, logger *slog.Logger) error {
	logger.Info("shutting down", "timeout", drain.String())
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := srv.Shutdown(dctx); err != nil {
		logger.Warn("cancelling requests still running", "requests", flight.count(), "after", drain.String())
		cancelBase(errShuttingDown)
		gctx, cancel := context.WithTimeout(context.Background(), cancelGrace)
		defer cancel()
		if n := flight.wait(gctx); n > 0 {
			logger.Warn("requests did not return after cancellation", "requests", n, "after", cancelGrace.String())
		}
		_ = srv.Close()
	}
	serr := <-served
	closed := make(chan struct{})
	go func() { closeStores(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(cancelGrace):
		logger.Warn("stores did not close in time; exiting", "after", cancelGrace.String())
	}
	if !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	logger.Info("stopped")
	return nil
}

// inFlight counts the requests being served.
type inFlight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to zero
}

func (f *inFlight) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		if f.n == 0 {
			f.idle = make(chan struct{})
		}
		f.n++
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			if f.n--; f.n == 0 {
				close(f.idle)
			}
			f.mu.Unlock()
		}()
		h.ServeHTTP(w, r)
	})
}

func (f *inFlight) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// wait returns 0 once no request is being served, or the number still served
// when ctx ends.
func (f *inFlight) wait(ctx context.Context) int {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return 0
	}
	idle := f.idle
	f.mu.Unlock()
	select {
	case <-idle:
		return 0
	case <-ctx.Done():
		return f.count()
	}
}
