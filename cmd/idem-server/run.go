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
	"time"

	"github.com/idemkit/idem/internal/demo"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/chaos"
)

// crashExitCode is the exit status of a Chaos-Crash.
const crashExitCode = 3

// run parses args, serves until ctx is done, then shuts down gracefully.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil))

	store, ledger, cleanup, err := openStore(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer cleanup()

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
	h := demo.Handler(store, ledger, inj, server.WithTTL(cfg.ttl), server.WithLockTTL(cfg.lockTTL))

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           logRequests(logger, h),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      chaos.MaxDelay + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("listening", "addr", ln.Addr().String(), "store", cfg.store, "chaos", cfg.chaos)
	fmt.Fprintf(stdout, "idem-server listening on http://%s\n", ln.Addr())

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down", "timeout", cfg.shutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	logger.Info("stopped")
	return nil
}
