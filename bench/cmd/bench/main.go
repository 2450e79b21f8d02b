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
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/idemkit/idem/bench"
)

func main() {
	quick := flag.Bool("quick", false, "CI-sized smoke run (about 90 s)")
	out := flag.String("out", "results", "directory for RESULTS.md and the charts")
	sections := flag.String("sections", "", "comma-separated sections to run, 1 to 9 (default all)")
	stores := flag.String("stores", "", "comma-separated stores section 5 measures, by the start of their names (postgres,redis; default all)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
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
	var only5 []string
	if *stores != "" {
		only5 = strings.Split(*stores, ",")
	}
	command := "cd bench && go run ./cmd/bench"
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "quick" {
			command += " -quick"
		} else if !strings.HasPrefix(f.Name, "test.") && f.Name != "cpuprofile" {
			command += " -" + f.Name + " " + f.Value.String()
		}
	})

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -cpuprofile:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	_, err := bench.Run(ctx, bench.Config{Quick: *quick, Out: *out, Command: command, Revision: revision(), Sections: only, Stores: only5, Log: os.Stderr})
	if err != nil {
		pprof.StopCPUProfile()
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
