package bench

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/idemkit/idem"
	idemotel "github.com/idemkit/idem/otel"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

// The workloads of section 7, the cost of OpenTelemetry.
const (
	// OTelClientMemory: one keyed POST through an idem.Transport whose next
	// RoundTripper answers in memory: the worst case, with nothing else to
	// pay for.
	OTelClientMemory = "client, answered in memory"
	// OTelMiddleware: one POST with a new key through server.Middleware over
	// the memory store, to a handler that answers 201.
	OTelMiddleware = "middleware over the memory store"
	// OTelClientLoopback: OTelClientMemory sent to a server on loopback, the
	// least a real call costs.
	OTelClientLoopback = "client, to a server on loopback"
)

// The variants of section 7: how the workload is instrumented.
const (
	// OTelOff: without the idemotel module.
	OTelOff = "off"
	// OTelNoop: idemotel on the no-op providers (trace/noop, metric/noop).
	OTelNoop = "no-op"
	// OTelGlobals: idemotel on the global providers, before an SDK is
	// installed: what a program gets that turns the module on and exports
	// nothing (no test of this package installs an SDK).
	OTelGlobals = "global, no SDK"
	// OTelSDK: idemotel on the SDK's providers: every span sampled (exported
	// nowhere), every measurement aggregated by a ManualReader.
	OTelSDK = "SDK"
	// OTelOffAgain: OTelOff measured a second time: its ratio to OTelOff is
	// the noise.
	OTelOffAgain = "off again"
)

// OTelWorkloads and OTelVariants list section 7's workloads and variants in
// the order of its tables.
var (
	OTelWorkloads = []string{OTelClientMemory, OTelMiddleware, OTelClientLoopback}
	OTelVariants  = []string{OTelOff, OTelNoop, OTelGlobals, OTelSDK, OTelOffAgain}
)

// OTelCostConfig sets up section 7.
type OTelCostConfig struct {
	// Batch is about how long one variant runs in a round: the number of
	// operations per batch is fixed for a workload from a warm-up of OTelOff,
	// and is the same for every variant.
	Batch time.Duration
	// Rounds is how many times every variant runs one batch, in an order
	// shuffled for each round; ratios are taken within a round.
	Rounds int
}

// OTelCostRow is one variant of one workload.
type OTelCostRow struct {
	Variant string
	// NsPerOp is the median over the rounds.
	NsPerOp float64
	// Ratio is this variant's time ÷ OTelOff's within each round.
	Ratio Spread
	// P is the two-sided p-value of the Mann-Whitney U test of the rounds'
	// Ratio against OTelOffAgain's (the noise); 1 for OTelOff and OTelOffAgain.
	P float64
	// AllocsPerOp and BytesPerOp are the medians over the rounds; over
	// loopback they include the server's, which runs in the same process.
	AllocsPerOp, BytesPerOp float64
}

// WithinNoise reports whether the variant's ratios cannot be told apart from
// the noise's (P at least 0.05), in at least minRounds rounds.
func (r OTelCostRow) WithinNoise(rounds int) bool { return rounds >= minRounds && r.P >= noiseLevel }

// OTelCostResult is one workload of section 7.
type OTelCostResult struct {
	Workload string
	// Ops is the number of operations of every batch; Rounds the rounds run.
	Ops, Rounds int
	// Rows holds one row per variant, in the order of OTelVariants.
	Rows []OTelCostRow
}

// Row returns the row of variant.
func (r OTelCostResult) Row(variant string) OTelCostRow {
	i := slices.IndexFunc(r.Rows, func(row OTelCostRow) bool { return row.Variant == variant })
	if i < 0 {
		return OTelCostRow{Variant: variant}
	}
	return r.Rows[i]
}

// RunOTelCost measures every workload in every variant of OTelVariants, in
// rounds of one batch per variant, interleaved in a shuffled order, and
// reports per-operation times and allocations and the ratios to OTelOff.
func RunOTelCost(cfg OTelCostConfig) ([]OTelCostResult, error) {
	if cfg.Rounds <= 0 || cfg.Batch <= 0 {
		return nil, fmt.Errorf("bench: RunOTelCost: Rounds and Batch must be set")
	}
	srv := newOverheadServer()
	defer srv.Close()
	rng := rand.New(rand.NewPCG(7, 7)) // every run shuffles the rounds alike
	var out []OTelCostResult
	for _, w := range OTelWorkloads {
		res, err := otelWorkload(cfg, w, srv.URL, rng)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

// otelWorkload measures one workload in every variant.
func otelWorkload(cfg OTelCostConfig, workload, loopbackURL string, rng *rand.Rand) (OTelCostResult, error) {
	stacks := make([]otelStack, len(OTelVariants))
	for i, v := range OTelVariants {
		stacks[i] = newOTelStack(workload, v, loopbackURL)
		defer stacks[i].close()
	}
	rounds, err := runRounds(len(stacks), cfg.Batch, cfg.Rounds, rng, func(i, n int) (blockResult, error) {
		s := stacks[i]
		s.fresh()
		r, err := runBlock(n, s.op)
		if err != nil {
			err = fmt.Errorf("bench: OpenTelemetry cost, %s, %s: %w", workload, s.variant, err)
		}
		return r, err
	})
	if err != nil {
		return OTelCostResult{}, err
	}

	ratios := make([][]float64, len(stacks))
	for i := range stacks {
		for k, r := range rounds[i] {
			ratios[i] = append(ratios[i], r.nsPerOp()/rounds[0][k].nsPerOp())
		}
	}
	noise := ratios[slices.Index(OTelVariants, OTelOffAgain)]
	res := OTelCostResult{Workload: workload, Ops: rounds[0][0].n, Rounds: cfg.Rounds}
	for i, s := range stacks {
		row := OTelCostRow{Variant: s.variant, Ratio: spreadOf(ratios[i]), P: 1}
		var ns, allocs, bytes []float64
		for _, r := range rounds[i] {
			ns, allocs, bytes = append(ns, r.nsPerOp()), append(allocs, r.allocsPerOp()), append(bytes, r.bytesPerOp())
		}
		row.NsPerOp, row.AllocsPerOp, row.BytesPerOp = median(ns), median(allocs), median(bytes)
		if s.variant != OTelOff && s.variant != OTelOffAgain {
			row.P = mannWhitneyP(ratios[i], noise)
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// otelStack is one workload set up in one variant.
type otelStack struct {
	variant string
	// op is one operation; fresh, called before each batch outside its time,
	// gives the middleware a new store, so that no batch pays for the
	// records of the ones before it.
	op    func() error
	fresh func()
	close func()
}

// otelProviders returns variant's providers: nil for the variants without
// the module, a nil pair for the global ones (idemotel's defaults), and
// shutdown, which ends the SDK's.
func otelProviders(variant string) (opts []idemotel.Option, shutdown func()) {
	shutdown = func() {}
	var tp trace.TracerProvider
	var mp metric.MeterProvider
	switch variant {
	case OTelOff, OTelOffAgain:
		return nil, shutdown
	case OTelGlobals:
		return []idemotel.Option{}, shutdown
	case OTelNoop:
		tp, mp = tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider()
	case OTelSDK:
		stp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		smp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		tp, mp = stp, smp
		shutdown = func() {
			_ = stp.Shutdown(context.Background())
			_ = smp.Shutdown(context.Background())
		}
	default:
		panic("bench: no OpenTelemetry variant " + variant)
	}
	return []idemotel.Option{idemotel.WithTracerProvider(tp), idemotel.WithMeterProvider(mp)}, shutdown
}

// newOTelStack sets workload up in variant; loopbackURL is the server of
// OTelClientLoopback.
func newOTelStack(workload, variant, loopbackURL string) otelStack {
	opts, shutdown := otelProviders(variant)
	s := otelStack{variant: variant, fresh: func() {}, close: shutdown}
	if workload == OTelMiddleware {
		s.op, s.fresh = otelMiddlewareOp(opts)
		return s
	}
	var next http.RoundTripper = memTransport{}
	url := "http://in-memory.invalid/payments"
	if workload == OTelClientLoopback {
		tr := newBaseTransport()
		next, url = tr, loopbackURL
		s.close = func() { tr.CloseIdleConnections(); shutdown() }
	}
	var rt http.RoundTripper = idem.NewTransport(next)
	if opts != nil {
		c := idemotel.NewClient(opts...)
		rt = idem.NewTransport(c.Transport(next), c.Option())
	}
	client := &http.Client{Transport: rt}
	s.op = func() error { return postPayment(context.Background(), client, url, overheadKey, 0) }
	return s
}

// otelMiddlewareOp returns the middleware workload instrumented with opts
// (none: off), and the function that gives it a new store.
func otelMiddlewareOp(opts []idemotel.Option) (op func() error, fresh func()) {
	var mwOpts []server.Option
	if opts != nil {
		mwOpts = append(mwOpts, idemotel.Server(append(opts, idemotel.WithStoreName("memory"))...))
	}
	created := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(paymentReply)
	})
	var mux *http.ServeMux
	fresh = func() {
		mux = http.NewServeMux()
		mux.Handle("POST /payments", server.Middleware(memstore.New(), mwOpts...)(created))
	}
	fresh()
	// Keys from 1000 on: formatting a number under 100 allocates nothing,
	// one above allocates once, alike in every variant.
	key := int64(1000)
	op = func() error {
		key++
		r := httptest.NewRequest(http.MethodPost, "/payments", bytes.NewReader(paymentBody))
		r.Header.Set(server.HeaderKey, "k"+strconv.FormatInt(key, 10))
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			return fmt.Errorf("status %d, want 201", w.Code)
		}
		return nil
	}
	return op, fresh
}

// addedAllocs is how many allocations per operation variant adds to OTelOff,
// rounded.
func (r OTelCostResult) addedAllocs(variant string) float64 {
	added := math.Round(r.Row(variant).AllocsPerOp - r.Row(OTelOff).AllocsPerOp)
	if added == 0 {
		return 0 // not -0, which prints as "-0"
	}
	return added
}
