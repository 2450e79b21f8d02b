package bench

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Markdown renders the report as RESULTS.md.
func (r *Report) Markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	mode := "full run"
	if r.Quick {
		mode = "quick run (-quick: CI-sized, numbers are indicative only)"
	}
	w("# idem benchmarks\n\n")
	w("- Command: `%s`\n", r.Command)
	w("- Date: %s (took %v)\n", r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Elapsed.Round(time.Second))
	w("- Machine: %s/%s, %s, %d cores (GOMAXPROCS %d), %s\n", r.Machine.OS, r.Machine.Arch, r.Machine.CPU,
		r.Machine.Cores, r.Machine.GOMAXPROCS, r.Machine.GoVersion)
	w("- Load average when the run started: %s (other work on the machine skews the timings)\n", r.Machine.LoadAvg)
	w("- Mode: %s\n", mode)
	w("- Peers: github.com/hashicorp/go-retryablehttp v0.7.8, github.com/failsafe-go/failsafe-go v0.9.8 (failsafehttp), " +
		"github.com/cenkalti/backoff/v4 v4.3.0. Clients and servers run in one process on loopback.\n\n")
	if r.Overhead != nil {
		r.writeOverhead(w)
	}
	if r.Faults != nil {
		r.writeFaults(w)
	}
	if r.Contention != nil {
		r.writeContention(w)
	}
	if r.Storm != nil {
		r.writeStorm(w)
	}
	if r.Server != nil {
		r.writeServer(w)
	}
	return b.String()
}

type writef func(format string, args ...any)

func (r *Report) writeOverhead(w writef) {
	w("## 1. Client overhead on the success path\n\n")
	w("Sequential POSTs of a 54-byte JSON body, answered 201 with a small JSON body, through each client stack; " +
		"every contender is an `*http.Client` over its own copy of one `http.Transport`. Retries are on everywhere " +
		"(five attempts in all) and nothing logs: idem with its defaults (it generates a UUIDv4 Idempotency-Key for " +
		"every POST, which is part of its cost), go-retryablehttp's `NewClient()` with `Logger = nil` through " +
		"`StandardClient()`, failsafe-go's `failsafehttp.NewRoundTripper` with `failsafehttp.NewRetryPolicyBuilder()`. " +
		"`testing.Benchmark`, median of the interleaved rounds; the same code runs as `go test -bench Overhead -benchmem`.\n\n")
	w("The loopback rows include the local server's work (same process), so the ratios there are diluted and noisy " +
		"(a few per cent either way is noise); the in-memory rows send through a RoundTripper that answers at once, " +
		"which leaves the retry layer's own cost.\n\n")
	for _, target := range []OverheadTarget{Loopback, InMemory} {
		w("**%s**\n\n", target)
		w("| client | ns/op | time × bare | allocs/op | allocs × bare | B/op |\n|---|--:|--:|--:|--:|--:|\n")
		for _, o := range r.Overhead {
			if o.Target != target {
				continue
			}
			w("| %s | %.0f | %.2f | %d | %.2f | %d |\n", o.Name, o.NsPerOp, o.NsRatio, o.AllocsPerOp, o.AllocsRatio, o.BytesPerOp)
		}
		w("\n")
	}
}

func (r *Report) writeFaults(w writef) {
	c := r.FaultCfg
	w("## 2. Correctness under faults\n\n")
	w("Each client makes %d logical payments (one customer each, %d in flight) against its own companion server "+
		"(`server/idemtest`: the payments API over the memory store), which injects the faults at random into every "+
		"attempt. Every attempt is bounded by a %v time-out (`WithAttemptTimeout` for idem, `http.Client.Timeout` for "+
		"the peers). The ledger is then counted: a payment beyond the first of an operation is a duplicate charge.\n\n",
		c.Ops, c.Concurrency, c.AttemptTimeout)
	w("How each is set up, and why the routes differ: the peers send no Idempotency-Key, so they post to " +
		"`/payments/unprotected`, which is what they get from a server without idem. For a fair comparison they are " +
		"also shown with a key that the caller sets on the request (their retries resend it) against the keyed route " +
		"`/payments`. idem's client is shown on both routes: on the unprotected one its key is ignored, which shows that " +
		"exactly-once needs the server half too. go-retryablehttp: `NewClient()` defaults (4 retries, 1 s to 30 s " +
		"backoff, its default retry policy), logging off. backoff/v4: `Retry` with `WithMaxRetries(NewExponentialBackOff(), 4)` " +
		"around a plain `http.Client`, retrying network errors, 408, 429 and 5xx. idem: `NewTransport` defaults.\n\n")
	w("The time-out scenarios differ in where the server is slow. Before the write (`Chaos-Delay`), the demo " +
		"server abandons a delayed write when the client goes away (the request's context ends the delay), so a time-out " +
		"costs attempts and time but rarely a payment; only a write that finishes just as the client gives up is charged " +
		"and lost. After the write (`Chaos-Delay-After-Write`, drawn for each attempt), the payment is made and the server " +
		"is only slow to answer, as real servers often are: a time-out is then a payment the client does not know about, " +
		"and a retry without a key charges again, like a retry after a lost response. With a key, a retry that arrives " +
		"while the timed-out attempt is still answering waits on the server for it and gets the replay, or, past the " +
		"server's wait, a 409 (in progress): a client that gives up on the 409 returns an error for an operation that is charged. An operation whose five attempts all " +
		"time out fails (about one in a thousand with a quarter of the attempts timing out). The late answers come after " +
		"1 to 3 s: longer than the attempt time-out, much shorter than every client's cap, the path of a mobile or BFF " +
		"client with a tight time-out in front of a slow payment; a retry with the key arrives while the first attempt " +
		"still runs.\n\n")
	w("Two times per row, each as p50 / p99 over the operations: *time to answer*, from the operation's start to the " +
		"caller's final answer, whatever it is; *time to outcome*, the same when that answer is the 201, and ∞ when it " +
		"is an error (the caller is not told whether it was charged: it never learns the outcome).\n\n")
	for _, sc := range c.Scenarios {
		w("**%s**\n\n", sc.Name)
		w("| client | route | Idempotency-Key | payments / operations | duplicate payments | operations not charged | errors returned (of which charged) | attempts per operation | time to answer p50 / p99 | time to outcome p50 / p99 | wall time |\n")
		w("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, f := range r.Faults {
			if f.Scenario != sc.Name {
				continue
			}
			w("| %s | `%s` | %s | %d / %d | **%d** | %d | %d (%d) | %.2f | %s / %s | %s / %s | %v |\n", f.Client.Name, f.Client.Route, f.Client.Key,
				f.Payments, f.Ops, f.Duplicates, f.Uncharged, f.Errors, f.ChargedErrors, f.AttemptsPerOp(),
				opTime(f.AnswerP50), opTime(f.AnswerP99), opTime(f.OutcomeP50), opTime(f.OutcomeP99), f.Elapsed.Round(10*time.Millisecond))
		}
		w("\n")
	}
}

// opTime formats a time to answer or to outcome of section 2: Never is ∞.
func opTime(d time.Duration) string {
	if d == Never {
		return "∞"
	}
	return d.Round(10 * time.Millisecond).String()
}

func (r *Report) writeContention(w writef) {
	c := r.ContCfg
	w("## 3. Jitter: the AWS \"Exponential Backoff and Jitter\" simulation\n\n")
	w("A reproduction of the AWS Architecture Blog's simulation in virtual time (an event queue; seed %d, so every "+
		"run gives the same numbers): N clients each update one row under optimistic concurrency control (read the "+
		"version, write with it; the write fails if another client wrote in between) and retry a failed write after "+
		"the network delay plus a backoff. Network delay |N(%v, %v)| each way; backoff base %v, cap %v, computed by "+
		"`idem.NewBackOff` for every strategy but \"no backoff\" (idem counts retries from 0, so its first wait is "+
		"drawn from [0, base)). Mean of %d runs per point.\n\n", c.Seed, c.NetMean, c.NetSD, c.Base, c.Cap, c.Runs)
	w("![total calls](%s)\n\n![completion time](%s)\n\n", ChartContentionCalls, ChartContentionTime)
	var names []string
	for _, p := range r.Contention {
		if !slices.Contains(names, p.Strategy) {
			names = append(names, p.Strategy)
		}
	}
	w("Writes sent until every client succeeded (mean per run) / time until the last one did:\n\n")
	w("| clients |")
	for _, n := range names {
		w(" %s |", n)
	}
	w("\n|--:|")
	for range names {
		w("--:|")
	}
	w("\n")
	for _, n := range c.Clients {
		w("| %d |", n)
		for _, name := range names {
			for _, p := range r.Contention {
				if p.Strategy == name && p.Clients == n {
					w(" %.0f / %v |", p.Calls, p.Time.Round(time.Millisecond))
				}
			}
		}
		w("\n")
	}
	w("\n")
}

func (r *Report) writeStorm(w writef) {
	st := r.Storm
	c := st.Config
	w("## 4. Retry storm, with and without a retry budget\n\n")
	w("An open-loop stream of %d GET calls per second through idem's Transport to a dependency that answers "+
		"every request 503 (no Retry-After) for %v, after %v of health and before %v of recovery, in real time. "+
		"idem's defaults scaled down by 30 so the storm fits in seconds: %d attempts, backoff %v to %v (full jitter), "+
		"%v per operation. The budget run shares one %s between all calls.\n\n",
		c.Rate, c.Outage, c.Warmup, c.Recovery, c.MaxAttempts, c.Base, c.Max.Round(time.Millisecond), c.MaxElapsed, c.BudgetLabel)
	w("![retry storm](%s)\n\n", ChartStorm)
	w("| | attempts per logical call | attempts per call started in the outage | peak attempts / calls started (one %v bucket) | calls failed | retries denied by the budget |\n", c.Bucket)
	w("|---|--:|--:|--:|--:|--:|\n")
	for _, run := range []StormRun{st.NoBudget, st.Budget} {
		w("| %s | %.2f | **%.2f** | %.2f | %d / %d | %d |\n", run.Name, run.AttemptsPerCall(), run.OutageAttemptsPerCall(),
			run.PeakLoad, run.Failed, run.Calls, run.RetriesDenied)
	}
	w("\nWithout a budget the dependency receives up to %d times its normal load while it is down; with one, about "+
		"1 + ratio, plus the budget's reserve (10 retries per second over its 10 s window), which is spent in the first "+
		"moments of the outage and shows as the early peak.\n\n", c.MaxAttempts)
}

func (r *Report) writeServer(w writef) {
	c := r.ServerCfg
	sv := r.Server
	w("## 5. Server: throughput and latency per store\n\n")
	w("Closed-loop clients POST payments for %v per row (after %v of warm-up; %d rounds, interleaved) to "+
		"the demo payments server (`server/chaos.Handler`, no faults) over loopback, client and server in one process "+
		"sharing the cores with the database servers: one client in the sequential rows, %d in the parallel ones. "+
		"\"new key\" sends a fresh Idempotency-Key every time (claim, handler, record); \"replay\" repeats one finished "+
		"key per client (the stored response is sent, the handler does not run). Each store is compared with the same "+
		"payments handler without idem, in the same run and mode:\n\n", c.Duration, c.Warmup, c.Rounds, c.Workers)
	w("- **%s**: `/payments/unprotected`, writing to the in-memory ledger; the baseline of the memory and Redis "+
		"stores, whose handler writes to the in-memory ledger too (Redis cannot share the business write's transaction).\n", BaselineBare)
	w("- **%s**: the payments handler writing to a PostgreSQL table (`server/pgstore/pgpayments`) in a transaction "+
		"of its own (BEGIN, INSERT, COMMIT before the response is sent, rollback on a 5xx), on the same database and "+
		"connection pool size as the PostgreSQL store, whose handler writes the same row inside the store's transaction "+
		"(`pgstore.Tx`), which also holds the claim and the record.\n\n", BaselineOwnTx)
	w("Each row runs on a fresh store, with tables (`idem_bench_*`) or a Redis key prefix (`idembench:*`) of its own, " +
		"dropped or deleted after the row. Round trips are counted by a pgx tracer (a statement, a batch or a prepare " +
		"is one) and a go-redis hook (a command or a pipeline is one), over the measured requests; the memory store " +
		"makes none.")
	if len(sv.Servers) > 0 {
		var servers []string
		for _, name := range slices.Sorted(maps.Keys(sv.Servers)) {
			servers = append(servers, sv.Servers[name])
		}
		w(" Servers: %s, on this machine.", strings.Join(servers, ", "))
	}
	w("\n\nHow to read it: requests, errors and latencies are those of all rounds; req/s is the median of the rounds' "+
		"throughputs, so that a stall (see max) in one round, which costs a single client its whole length, does not "+
		"decide it. With %d clients on %d cores the processor is saturated (this process and the database "+
		"share it), so a parallel ratio is about the ratio of CPU cost per request. The PostgreSQL store's own benchmark "+
		"(`BenchmarkPayments*` in server/pgstore) serves requests in-process and alternates idem and baseline request by "+
		"request; its ratio of mean latencies is not the same quantity.\n\n", c.Workers, r.Machine.Cores)
	if len(sv.Rows) > 0 {
		w("![server throughput](%s)\n\n", ChartServer)
	}
	for _, mode := range []string{ModeSequential, ModeParallel} {
		var rows []ServerLoadResult
		for _, s := range sv.Rows {
			if s.Mode == mode {
				rows = append(rows, s)
			}
		}
		if len(rows) == 0 {
			continue
		}
		w("**%s (%d client%s)**\n\n", mode, rows[0].Workers, plural(rows[0].Workers))
		w("| store | case | compared to | requests | req/s | × baseline | p50 | p99 | added p50 | added p99 | max | round trips / request (added) | errors |\n")
		w("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, s := range rows {
			store, vs, ratio, add50, add99 := s.Store, s.Baseline, fmt.Sprintf("**%.2f**", s.Ratio), signed(s.AddedP50), signed(s.AddedP99)
			if s.Case == CaseBaseline {
				store, vs, ratio, add50, add99 = s.Baseline, "", "1.00", "", ""
			}
			trips := "—"
			if s.RoundTrips >= 0 {
				trips = fmt.Sprintf("%.2f", s.RoundTrips)
				if s.Case != CaseBaseline {
					trips += fmt.Sprintf(" (%+.2f)", s.AddedRoundTrips)
				}
			}
			w("| %s | %s | %s | %d | %.0f | %s | %v | %v | %s | %s | %v | %s | %d |\n", store, s.Case, vs, s.Requests, s.Throughput,
				ratio, s.P50.Round(time.Microsecond), s.P99.Round(time.Microsecond), add50, add99, s.Max.Round(time.Microsecond), trips, s.Errors)
		}
		w("\n")
	}
	for _, s := range sv.Rows {
		if s.Errors > 0 {
			w("Failed requests, %s, %s, %s: %d; the first: `%s`.\n\n", s.Label(), s.Case, s.Mode, s.Errors, s.FirstError)
		}
	}
	r.writeServerTargets(w)
	if len(sv.Skipped) > 0 {
		names := slices.Sorted(maps.Keys(sv.Skipped))
		for _, name := range names {
			w("**Skipped %s**: %s.\n\n", name, sv.Skipped[name])
		}
	}
}

// writeServerTargets checks the rows against the stores' targets: PostgreSQL
// keeps at least 60%% of its baseline's throughput for new keys, and Redis
// makes at most two round trips per first request and one per replay.
func (r *Report) writeServerTargets(w writef) {
	var lines []string
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	for _, s := range r.Server.Rows {
		switch {
		case s.Store == StorePostgres && s.Case == CaseNewKey:
			lines = append(lines, fmt.Sprintf("PostgreSQL, new key, %s: %.2f × its own-transaction baseline (target ≥ %.2f: %s)",
				s.Mode, s.Ratio, PostgresTargetRatio, verdict(s.Ratio >= PostgresTargetRatio)))
		case s.Store == StoreRedis && s.RoundTrips >= 0:
			lines = append(lines, fmt.Sprintf("Redis, %s, %s: %.2f round trips per request (target ≤ %.0f: %s)",
				s.Case, s.Mode, s.RoundTrips, redisTripsTarget(s.Case), verdict(meetsRedisTrips(s))))
		}
	}
	if len(lines) == 0 {
		return
	}
	w("Targets:\n\n")
	for _, l := range lines {
		w("- %s\n", l)
	}
	w("\n")
}

// signed formats d with its sign, rounded to the microsecond.
func signed(d time.Duration) string {
	if d < 0 {
		return "−" + (-d).Round(time.Microsecond).String()
	}
	return "+" + d.Round(time.Microsecond).String()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
