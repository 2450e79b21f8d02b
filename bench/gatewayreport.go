package bench

import "fmt"

func (r *Report) writeGateway(w writef) {
	c, g := r.GatewayCfg, r.Gateway
	w("## 8. The gateway's cost on the success path\n\n")
	w("One client sends keyed POSTs (a new key each, a 54-byte JSON body, a bearer token) through a front to a loopback " +
		"upstream that answers 201: a plain `httputil.ReverseProxy` (the baseline, on the default transport, connections " +
		"kept alive), the same proxy on a new connection per request (what a connection costs: the gateway pays it for a " +
		"protected request it cannot keep on a kept-alive connection, such as a protected GET), idem-server's gateway " +
		"(`cmd/idem-server/gateway`, its defaults, protected POSTs on kept-alive connections) on the memory and the Redis store " +
		"(every request a first execution: the claim, the durable mark, the forward, the record), and the gateway passing " +
		"an unprotected POST through. Client, fronts and upstream share the process and its cores.\n\n")
	w("How it is measured: %d rounds; a round runs every front once for the same number of requests (%d, a batch of "+
		"about %v of the baseline), in an order shuffled for each round; the ratios are taken within a round, then their "+
		"median (and quartiles). *Again* is the baseline measured a second time: its ratio is the noise. A front is *within "+
		"noise* when its ratios cannot be told from the noise's (Mann-Whitney U, two-sided p ≥ %.2f).\n\n",
		c.Rounds, g.Ops, c.Batch, noiseLevel)
	w("| front | per request | ÷ httputil.ReverseProxy | p | allocations per request |\n")
	w("|---|--:|--:|--:|--:|\n")
	for _, row := range g.Rows {
		p := "—"
		if row.Front != GatewayPlain && row.Front != GatewayPlainAgain {
			p = fmt.Sprintf("%.3f", row.P) + gatewayNoiseWord(row, g.Rounds)
		}
		w("| %s | %s | %s | %s | %.0f |\n", row.Front, nsTime(row.NsPerOp), row.Ratio, p, row.AllocsPerOp)
	}
	for _, f := range GatewayFronts {
		if why, ok := g.Skipped[f]; ok {
			w("\nSkipped %s: %s\n", f, why)
		}
	}
	w("\n")
}

// gatewayNoiseWord says whether a front of section 8 is within noise.
func gatewayNoiseWord(row GatewayCostRow, rounds int) string {
	return noiseWord(OTelCostRow{Ratio: row.Ratio, P: row.P}, rounds)
}
