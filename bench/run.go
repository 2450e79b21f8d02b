package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Config says what Run measures and where it writes.
type Config struct {
	// Quick makes every section CI-sized: the whole run takes about 90 s.
	Quick bool
	// Out is the directory RESULTS.md and the charts are written to.
	Out string
	// Command is how the run was started, quoted in RESULTS.md.
	Command string
	// Revision names the code measured (a commit), quoted in RESULTS.md when
	// set.
	Revision string
	// Sections lists the sections to run (1 to 9); empty means all.
	Sections []int
	// Stores selects the stores section 5 measures by the start of their
	// names, ignoring case ("postgres" is PostgreSQL directly and through
	// PgBouncer); empty means every store. Each store keeps its baseline.
	Stores []string
	// Log receives one line of progress per step; nil discards it.
	Log io.Writer
}

// Report holds every section's results, as Run wrote them.
type Report struct {
	Quick      bool
	Command    string
	Revision   string
	Started    time.Time
	Elapsed    time.Duration
	Machine    Machine
	Overhead   []OverheadResult
	Faults     []FaultResult
	FaultCfg   FaultConfig
	Contention []ContentionPoint
	ContCfg    ContentionConfig
	Storm      *StormResult
	Server     *ServerLoadReport
	ServerCfg  ServerLoadConfig
	Foreign    []ForeignResult
	ForeignCfg ForeignConfig
	OTel       []OTelCostResult
	OTelCfg    OTelCostConfig
	Gateway    *GatewayCostResult
	GatewayCfg GatewayCostConfig
	GRPC       *GRPCCostResult
	GRPCCfg    GRPCCostConfig
	// Charts lists the PNG files written, relative to Out.
	Charts []string
}

// Chart file names, in Out.
const (
	ChartContentionCalls = "contention_calls.png"
	ChartContentionTime  = "contention_time.png"
	ChartStorm           = "storm.png"
	ChartServer          = "server_throughput.png"
	ResultsFile          = "RESULTS.md"
)

// Run runs the selected sections, writes RESULTS.md and the charts into
// cfg.Out, and returns what it measured.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Out == "" {
		return nil, fmt.Errorf("bench: Run: Out must be set")
	}
	for _, s := range cfg.Sections {
		if s < 1 || s > 9 {
			return nil, fmt.Errorf("bench: Run: no section %d (sections are 1 to 9)", s)
		}
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", args...)
		}
	}
	want := func(s int) bool { return len(cfg.Sections) == 0 || slices.Contains(cfg.Sections, s) }
	rep := &Report{Quick: cfg.Quick, Command: cfg.Command, Revision: cfg.Revision, Started: time.Now(), Machine: ThisMachine()}
	p := paramsFor(cfg.Quick)
	var err error

	if want(1) {
		logf("1/9 client overhead (%d rounds of blocks of about %v)", p.overhead.Rounds, p.overhead.Block)
		if rep.Overhead, err = RunOverhead(p.overhead, OverheadContenders()); err != nil {
			return nil, err
		}
	}
	if want(2) {
		logf("2/9 correctness under faults (%d payments per client and scenario)", p.faults.Ops)
		rep.FaultCfg = p.faults
		if rep.Faults, err = RunFaults(ctx, p.faults, FaultClients()); err != nil {
			return nil, err
		}
	}
	if want(3) {
		logf("3/9 jitter: contention simulation (%d runs per point)", p.contention.Runs)
		rep.ContCfg = p.contention
		rep.Contention = RunContention(p.contention, ContentionStrategies())
		if err := writeContentionCharts(cfg.Out, rep.Contention); err != nil {
			return nil, err
		}
		rep.Charts = append(rep.Charts, ChartContentionCalls, ChartContentionTime)
	}
	if want(4) {
		logf("4/9 retry storm (%v outage at %d calls/s)", p.storm.Outage, p.storm.Rate)
		st, err := RunStorm(ctx, p.storm)
		if err != nil {
			return nil, err
		}
		rep.Storm = &st
		if err := writeStormChart(cfg.Out, st); err != nil {
			return nil, err
		}
		rep.Charts = append(rep.Charts, ChartStorm)
	}
	if want(5) {
		logf("5/9 server throughput (%d workers, %d rounds of %v per row)", p.server.Workers, p.server.Rounds, p.server.Duration)
		rep.ServerCfg = p.server
		sl, err := RunServerLoad(ctx, p.server, selectStores(ServerStores(), cfg.Stores))
		if err != nil {
			return nil, err
		}
		rep.Server = &sl
		if len(sl.Rows) > 0 {
			if err := writeServerChart(cfg.Out, sl); err != nil {
				return nil, err
			}
			rep.Charts = append(rep.Charts, ChartServer)
		}
	}
	if want(6) {
		logf("6/9 a server that does not implement keys (%d scenarios, the clients of a scenario at once)", len(p.foreign.Scenarios))
		rep.ForeignCfg = p.foreign
		if rep.Foreign, err = RunForeign(ctx, p.foreign, ForeignClients()); err != nil {
			return nil, err
		}
	}
	if want(7) {
		logf("7/9 the cost of OpenTelemetry (%d rounds of batches of about %v)", p.otel.Rounds, p.otel.Batch)
		rep.OTelCfg = p.otel
		if rep.OTel, err = RunOTelCost(p.otel); err != nil {
			return nil, err
		}
	}
	if want(8) {
		logf("8/9 the gateway's cost (%d rounds of batches of about %v)", p.gateway.Rounds, p.gateway.Batch)
		rep.GatewayCfg = p.gateway
		gw, err := RunGatewayCost(ctx, p.gateway)
		if err != nil {
			return nil, err
		}
		rep.Gateway = &gw
	}
	if want(9) {
		logf("9/9 a gRPC call's cost (%d rounds of batches of about %v)", p.grpc.Rounds, p.grpc.Batch)
		rep.GRPCCfg = p.grpc
		g, err := RunGRPCCost(ctx, p.grpc)
		if err != nil {
			return nil, err
		}
		rep.GRPC = &g
	}
	rep.Elapsed = time.Since(rep.Started)
	path := filepath.Join(cfg.Out, ResultsFile)
	if err := os.WriteFile(path, []byte(rep.Markdown()), 0o644); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	logf("wrote %s in %v", path, rep.Elapsed.Round(time.Second))
	return rep, nil
}

// selectStores returns the stores whose names start with one of names,
// ignoring case; all of them when names is empty.
func selectStores(stores []StoreTarget, names []string) []StoreTarget {
	if len(names) == 0 {
		return stores
	}
	return slices.DeleteFunc(stores, func(st StoreTarget) bool {
		return !slices.ContainsFunc(names, func(n string) bool {
			return strings.HasPrefix(strings.ToLower(st.Name), strings.ToLower(n))
		})
	})
}

// params are the settings of every section for one mode.
type params struct {
	overhead   OverheadConfig
	faults     FaultConfig
	contention ContentionConfig
	storm      StormConfig
	server     ServerLoadConfig
	foreign    ForeignConfig
	otel       OTelCostConfig
	gateway    GatewayCostConfig
	grpc       GRPCCostConfig
}

// paramsFor returns the full run's settings, or the quick run's.
func paramsFor(quick bool) params {
	p := params{
		overhead:   OverheadConfig{Block: 40 * time.Millisecond, Rounds: 30},
		faults:     DefaultFaults(),
		contention: DefaultContention(),
		storm:      DefaultStorm(),
		// Short rows, many rounds: the interleaving and the median of the rounds even
		// out other work on the machine.
		server:  ServerLoadConfig{Workers: 16, Duration: 500 * time.Millisecond, Warmup: 150 * time.Millisecond, Rounds: 7},
		foreign: DefaultForeign(),
		otel:    OTelCostConfig{Batch: 25 * time.Millisecond, Rounds: 61},
		// Each gateway request opens a connection: rounds are kept small
		// enough that the run's connections stay well under the ephemeral
		// ports of one loopback address.
		gateway: GatewayCostConfig{Batch: 20 * time.Millisecond, Rounds: 31},
		grpc:    GRPCCostConfig{Batch: 40 * time.Millisecond, Rounds: 61},
	}
	if !quick {
		return p
	}
	p.overhead = OverheadConfig{Block: 10 * time.Millisecond, Rounds: 3}
	p.otel = OTelCostConfig{Batch: 5 * time.Millisecond, Rounds: 3}
	p.gateway = GatewayCostConfig{Batch: 5 * time.Millisecond, Rounds: 3}
	p.grpc = GRPCCostConfig{Batch: 5 * time.Millisecond, Rounds: 3}
	p.faults.Ops, p.faults.Concurrency = 30, 15
	p.contention.Clients = []int{1, 10, 20, 30, 40, 50}
	p.contention.Runs = 10
	// As many calls in the outage as the full run (400), in half the time.
	p.storm.Rate = 400
	p.storm.Warmup, p.storm.Outage, p.storm.Recovery = 250*time.Millisecond, time.Second, 250*time.Millisecond
	p.server = ServerLoadConfig{Workers: 8, Duration: 250 * time.Millisecond, Warmup: 100 * time.Millisecond, Rounds: 1}
	// The same handlers and outages (the times are the point), 20
	// operations per row, a shorter stream.
	p.foreign.Ops = 20
	var scs []ForeignScenario
	for _, sc := range p.foreign.Scenarios {
		switch {
		case sc.Ops > p.foreign.Ops:
			continue
		case sc.Kind == ForeignConflict:
			sc.Name = strings.Replace(sc.Name, "50 operations", "20 operations", 1)
		case sc.Kind == ForeignSustained:
			sc = SustainedOutage(sc.Rate, 2*time.Second)
		}
		scs = append(scs, sc)
	}
	p.foreign.Scenarios = scs
	return p
}

// writeContentionCharts draws section 3's two charts.
func writeContentionCharts(dir string, pts []ContentionPoint) error {
	var calls, times []Series
	for _, s := range ContentionStrategies() {
		c, t := Series{Name: s.Name}, Series{Name: s.Name}
		for _, p := range pts {
			if p.Strategy != s.Name {
				continue
			}
			c.X, c.Y = append(c.X, float64(p.Clients)), append(c.Y, p.Calls)
			t.X, t.Y = append(t.X, float64(p.Clients)), append(t.Y, p.Time.Seconds()*1000)
		}
		calls, times = append(calls, c), append(times, t)
	}
	if err := writeLineChart(filepath.Join(dir, ChartContentionCalls), "OCC contention: total calls (lower is better)",
		"contending clients", "writes sent, mean per run", calls); err != nil {
		return err
	}
	return writeLineChart(filepath.Join(dir, ChartContentionTime), "OCC contention: completion time (lower is better)",
		"contending clients", "time until the last client succeeds (ms)", times)
}

// writeStormChart draws section 4's chart: attempts per second received by the
// failing dependency, with and without the budget, and the offered load.
func writeStormChart(dir string, st StormResult) error {
	// Drop the empty buckets after the last attempt.
	n := 0
	for i := range st.Offered {
		if st.Offered[i] > 0 || st.NoBudget.Load[i] > 0 || st.Budget.Load[i] > 0 {
			n = i + 1
		}
	}
	secs := func(name string, ys []float64) Series {
		s := Series{Name: name}
		for i, y := range ys[:n] {
			s.X = append(s.X, (float64(i)+0.5)*st.Config.Bucket.Seconds())
			s.Y = append(s.Y, y)
		}
		return s
	}
	title := fmt.Sprintf("Retry storm: the dependency fails from %v to %v", st.Config.Warmup, st.Config.Warmup+st.Config.Outage)
	return writeLineChart(filepath.Join(dir, ChartStorm), title, "time (s)", "per second", []Series{
		secs("logical calls started", st.Offered),
		secs("attempts received, no budget", st.NoBudget.Load),
		secs("attempts received, retry budget", st.Budget.Load),
	})
}

// writeServerChart draws section 5's chart: each store's throughput as a
// multiple of its baseline's, per mode and case.
func writeServerChart(dir string, sl ServerLoadReport) error {
	var stores []string
	for _, r := range sl.Rows {
		if r.Case != CaseBaseline && !slices.Contains(stores, r.Store) {
			stores = append(stores, r.Store)
		}
	}
	var groups []BarGroup
	for _, mode := range []string{ModeSequential, ModeParallel} {
		for _, kind := range []string{CaseNewKey, CaseReplay} {
			g := BarGroup{Name: mode + ", " + kind, Values: make([]float64, len(stores))}
			for _, r := range sl.Rows {
				if r.Mode == mode && r.Case == kind {
					g.Values[slices.Index(stores, r.Store)] = r.Ratio
				}
			}
			groups = append(groups, g)
		}
	}
	short := make([]string, len(stores))
	for i, s := range stores {
		short[i] = chartLabel(s)
	}
	return writeBarChart(filepath.Join(dir, ChartServer), "Server throughput per store (higher is better)",
		"throughput × its baseline (handler without idem)", short, groups, 1, "baseline")
}

// chartLabel is a store's name short enough for the chart's axis: without the
// package, and the topologies by what sets them apart.
func chartLabel(store string) string {
	switch store {
	case StoreRedisSentinel:
		return "Sentinel, WAIT 1"
	case StorePgBouncer:
		return "PgBouncer"
	}
	label, _, _ := strings.Cut(store, " (")
	return label
}
