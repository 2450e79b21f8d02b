package bench

import "fmt"

func (r *Report) writeOTel(w writef) {
	c := r.OTelCfg
	w("## 7. The cost of OpenTelemetry\n\n")
	w("The client and the middleware with the `idemotel` module (github.com/idemkit/idem/otel) off, and on: the no-op "+
		"providers (`trace/noop`, `metric/noop`), the global providers before an SDK is installed (what a program that "+
		"turns the module on and exports nothing gets), and the SDK's (every span sampled and exported nowhere, every "+
		"measurement aggregated by a `ManualReader`). Workloads: %s (a keyed POST through `idem.Transport`, the worst "+
		"case: nothing else to pay for); %s (a POST with a new key through `server.Middleware`, handler answering 201; "+
		"the requests carry no server span, so the middleware's span event is not added and SDK ÷ off is its metrics' "+
		"cost); %s (the first workload sent to a local server, the least a real call costs).\n\n",
		OTelClientMemory, OTelMiddleware, OTelClientLoopback)
	w("How it is measured: each workload runs %d rounds; a round runs every variant once for the same number of "+
		"operations (a batch of about %v of *off*, after a garbage collection), in an order shuffled for each round, and "+
		"the ratios are taken within a round, then their median (and quartiles) over the rounds. *Off again* is *off* "+
		"measured a second time: its ratio is the noise. A variant is *within noise* when the rounds' ratios cannot be "+
		"told from the noise's by a Mann-Whitney U test (two-sided p ≥ %.2f).\n\n", c.Rounds, c.Batch, noiseLevel)
	w("| workload | off, per operation | no-op ÷ off | p | global, no SDK ÷ off | p | SDK ÷ off | off again ÷ off (noise) |\n")
	w("|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, o := range r.OTel {
		noop, glob := o.Row(OTelNoop), o.Row(OTelGlobals)
		w("| %s | %s | %s | %.3f%s | %s | %.3f%s | %s | %s |\n", o.Workload, nsTime(o.Row(OTelOff).NsPerOp),
			noop.Ratio, noop.P, noiseWord(noop, o.Rounds), glob.Ratio, glob.P, noiseWord(glob, o.Rounds),
			o.Row(OTelSDK).Ratio, o.Row(OTelOffAgain).Ratio)
	}
	w("\n**Allocations per operation** (medians over the rounds; over loopback they include the server's, in the same process)\n\n")
	w("| workload | off | no-op | global, no SDK | SDK | off again | added by no-op / global / SDK |\n|---|--:|--:|--:|--:|--:|--:|\n")
	for _, o := range r.OTel {
		w("| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %+.0f / %+.0f / %+.0f |\n", o.Workload,
			o.Row(OTelOff).AllocsPerOp, o.Row(OTelNoop).AllocsPerOp, o.Row(OTelGlobals).AllocsPerOp,
			o.Row(OTelSDK).AllocsPerOp, o.Row(OTelOffAgain).AllocsPerOp,
			o.addedAllocs(OTelNoop), o.addedAllocs(OTelGlobals), o.addedAllocs(OTelSDK))
	}
	w("\n")
}

// noiseWord says whether a variant of section 7 is within noise, after its
// p-value: " (within noise)", " (**slower**)", " (**faster**)", or, with too
// few rounds to tell, nothing.
func noiseWord(row OTelCostRow, rounds int) string {
	switch {
	case rounds < minRounds:
		return ""
	case row.WithinNoise(rounds):
		return " (within noise)"
	case row.Ratio.Median > 1:
		return " (**slower**)"
	}
	return " (**faster**)"
}

// nsTime formats a time per operation in ns as µs.
func nsTime(ns float64) string {
	return fmt.Sprintf("%.2f µs", ns/1000)
}
