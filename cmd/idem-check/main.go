package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/idemkit/idem/cmd/idem-check/check"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the command: its exit status is 0 when no row failed, 1 for a FAIL
// or an error, 2 for a bad command line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		return 2
	}
	if o.version {
		fmt.Fprintln(stdout, "idem-check", buildVersion())
		return 0
	}
	b, err := check.PlanBound(o.cfg)
	if err != nil {
		fmt.Fprintf(stderr, "idem-check: %v\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "idem-check: sending at most %d requests, all to %s %s", b.Requests, strings.Join(o.cfg.Methods, ","), o.cfg.URL)
	if o.cfg.Effect != nil {
		fmt.Fprintf(stderr, ", and at most %d effect counts (%s)", b.Reads, o.cfg.Effect)
	}
	fmt.Fprintf(stderr, ", within %s (waiting %s of it on purpose)\n", b.Time, b.Wait)
	rep, err := check.Run(ctx, o.cfg)
	if err != nil {
		fmt.Fprintf(stderr, "idem-check: %v\n", err)
		return 1
	}
	if o.json {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteText(stdout, o.verbose)
	}
	if err == nil && o.jsonFile != "" {
		err = writeFile(o.jsonFile, rep.WriteJSON)
	}
	if err == nil && o.junit != "" {
		err = writeFile(o.junit, rep.WriteJUnit)
	}
	if err != nil {
		fmt.Fprintf(stderr, "idem-check: %v\n", err)
		return 1
	}
	if rep.Failed() {
		return 1
	}
	return 0
}

// writeFile writes a report to the file name with write.
func writeFile(name string, write func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
