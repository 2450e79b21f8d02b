// Command bench runs idem's benchmarks side by side with its peers and writes
// RESULTS.md and PNG charts:
//
//	cd bench && go run ./cmd/bench            # full run, about seven minutes on 2 cores with every topology
//	cd bench && go run ./cmd/bench -quick     # CI-sized smoke run, about 90 s
//	cd bench && go run ./cmd/bench -out /tmp/results -sections 1,3
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"

	"github.com/idemkit/idem/bench"
)

func main() {
	quick := flag.Bool("quick", false, "CI-sized smoke run (about 90 s)")
	out := flag.String("out", "results", "directory for RESULTS.md and the charts")
	sections := flag.String("sections", "", "comma-separated sections to run, 1 to 8 (default all)")
	flag.Parse()

	var only []int
	if *sections != "" {
		for _, s := range strings.Split(*sections, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench: -sections: %q is not a section number\n", s)
				os.Exit(2)
			}
			only = append(only, n)
		}
	}
	command := "cd bench && go run ./cmd/bench"
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "quick" {
			command += " -quick"
		} else if !strings.HasPrefix(f.Name, "test.") {
			command += " -" + f.Name + " " + f.Value.String()
		}
	})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	_, err := bench.Run(ctx, bench.Config{Quick: *quick, Out: *out, Command: command, Revision: revision(), Sections: only, Log: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// revision names the commit of the repository the run measures, and says so
// when the tree differs from it (bench/results aside, which runs rewrite);
// "" outside a git checkout.
func revision() string {
	git := func(args ...string) (string, error) {
		out, err := exec.Command("git", args...).Output()
		return strings.TrimSpace(string(out)), err
	}
	rev, err := git("rev-parse", "--short=12", "HEAD")
	if err != nil {
		return ""
	}
	top, err := git("rev-parse", "--show-toplevel")
	if err != nil {
		return ""
	}
	rev = "commit " + rev
	if st, err := git("-C", top, "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench/results"); err == nil && st != "" {
		rev += ", with uncommitted changes"
	}
	return rev
}
