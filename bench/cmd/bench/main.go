// Command bench runs idem's benchmarks side by side with its peers and writes
// RESULTS.md and PNG charts:
//
//	cd bench && go run ./cmd/bench            # full run, about six minutes on 2 cores with every topology
//	cd bench && go run ./cmd/bench -quick     # CI-sized smoke run, about 25 s
//	cd bench && go run ./cmd/bench -out /tmp/results -sections 1,3
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/idemkit/idem/bench"
)

func main() {
	quick := flag.Bool("quick", false, "CI-sized smoke run (about 25 s)")
	out := flag.String("out", "results", "directory for RESULTS.md and the charts")
	sections := flag.String("sections", "", "comma-separated sections to run, 1 to 6 (default all)")
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
	_, err := bench.Run(ctx, bench.Config{Quick: *quick, Out: *out, Command: command, Sections: only, Log: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
