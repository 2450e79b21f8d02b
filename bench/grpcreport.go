package bench

import "fmt"

func (r *Report) writeGRPC(w writef) {
	c, g := r.GRPCCfg, r.GRPC
	w("## 9. A gRPC call's cost on the success path\n\n")
	w("One client makes unary calls (the demo service's Charge, a method with no `idempotency_level`, a 19-byte " +
		"request, a 10 s deadline each) one after another to a gRPC server on loopback TCP that answers each: bare (no " +
		"interceptor, the baseline), bare with a new key (a UUID) put in each call's metadata by the caller (what sending a key " +
		"costs on the wire and in the server's reading of it, which any keyed call pays), through go-grpc-middleware's retry interceptor (`interceptors/retry` with " +
		"`WithMax(3)`, its defaults otherwise; without `WithMax` it passes calls through untouched), through idem's client " +
		"interceptor on its defaults (a key generated for each call, the retry engine, the interceptor's own budget; " +
		"grpc-go's retries off), and through idem's client and server interceptors on the memory store (every call a " +
		"first execution: the claim, the handler, the record). Client and server share the process and its cores.\n\n")
	w("How it is measured: %d rounds; a round runs every caller once for the same number of calls (%d, a batch of "+
		"about %v of the baseline), in an order shuffled for each round; the ratios are taken within a round, then their "+
		"median (and quartiles). *Again* is the baseline measured a second time: its ratio is the noise. A caller is *within "+
		"noise* when its ratios cannot be told from the noise's (Mann-Whitney U, two-sided p ≥ %.2f).\n\n",
		c.Rounds, g.Ops, c.Batch, noiseLevel)
	w("| caller | per call | ÷ bare call | p | allocations per call |\n")
	w("|---|--:|--:|--:|--:|\n")
	for _, row := range g.Rows {
		p := "—"
		if row.Front != GRPCBare && row.Front != GRPCBareAgain {
			p = fmt.Sprintf("%.3f", row.P) + gatewayNoiseWord(row, g.Rounds)
		}
		w("| %s | %s | %s | %s | %.0f |\n", row.Front, nsTime(row.NsPerOp), row.Ratio, p, row.AllocsPerOp)
	}
	w("\n")
}
