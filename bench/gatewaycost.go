package bench

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/cmd/idem-server/gateway"
	"github.com/idemkit/idem/internal/testkit/servicetest"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
	"github.com/idemkit/idem/server/redisstore"
)

// The fronts of section 8, the gateway's cost on the success path: what
// stands between the client and a loopback upstream that answers 201.
const (
	// GatewayPlain: a plain httputil.ReverseProxy on the default transport
	// (connections kept alive): the baseline.
	GatewayPlain = "httputil.ReverseProxy"
	// GatewayPlainFresh: the same proxy on a new connection for each
	// request: what a connection costs, which the gateway pays for the
	// protected requests it cannot keep on a kept-alive connection (a
	// protected GET, say; docs/gateway.md) and paid for every protected
	// request before it reused connections.
	GatewayPlainFresh = "httputil.ReverseProxy, a connection per request"
	// GatewayMemory and GatewayRedis: idem-server's gateway
	// (cmd/idem-server/gateway), each request protected with a new key: a claim, the
	// durable mark, the forward on a kept-alive connection, the record.
	GatewayMemory = "gateway, memory store"
	GatewayRedis  = "gateway, Redis store"
	// GatewayPass: the gateway passing an unprotected request through (a POST
	// no pattern protects): its routing's cost.
	GatewayPass = "gateway, passed through (unprotected)"
	// GatewayPlainAgain: GatewayPlain measured a second time: its ratio to
	// GatewayPlain is the noise.
	GatewayPlainAgain = "httputil.ReverseProxy again"
)

// GatewayFronts lists section 8's fronts in the order of its table.
var GatewayFronts = []string{GatewayPlain, GatewayPlainFresh, GatewayMemory, GatewayRedis, GatewayPass, GatewayPlainAgain}

// GatewayCostConfig sets up section 8, measured as section 7 is: rounds of
// one batch per front, in a shuffled order, ratios within a round.
type GatewayCostConfig struct {
	// Batch is about how long one front runs in a round (sized from
	// GatewayPlain's speed; the same number of requests for every front).
	Batch time.Duration
	// Rounds is how many times every front runs one batch.
	Rounds int
}

// GatewayCostRow is one front of section 8.
type GatewayCostRow struct {
	Front string
	// NsPerOp is the median over the rounds of the time per request, as the
	// client sees it.
	NsPerOp float64
	// Ratio is this front's time ÷ GatewayPlain's within each round.
	Ratio Spread
	// P is the two-sided p-value of the Mann-Whitney U test of the rounds'
	// Ratio against GatewayPlainAgain's (the noise); 1 for GatewayPlain and
	// GatewayPlainAgain.
	P float64
	// AllocsPerOp is the median over the rounds: the client's, the front's
	// and the upstream's together (they share the process).
	AllocsPerOp float64
}

// WithinNoise reports whether the front's ratios cannot be told apart from
// the noise's, in at least minRounds rounds.
func (r GatewayCostRow) WithinNoise(rounds int) bool {
	return rounds >= minRounds && r.P >= noiseLevel
}

// GatewayCostResult is section 8.
type GatewayCostResult struct {
	// Ops is the number of requests of every batch; Rounds the rounds run.
	Ops, Rounds int
	// Rows holds one row per measured front, in the order of GatewayFronts.
	Rows []GatewayCostRow
	// Skipped says why a front was not measured (Redis not reachable).
	Skipped map[string]string
}

// Row returns the row of front (a zero row when it was not measured).
func (r GatewayCostResult) Row(front string) GatewayCostRow {
	i := slices.IndexFunc(r.Rows, func(row GatewayCostRow) bool { return row.Front == front })
	if i < 0 {
		return GatewayCostRow{Front: front}
	}
	return r.Rows[i]
}

// gatewayFront is one front set up for section 8.
type gatewayFront struct {
	name  string
	url   string // where the client posts
	fresh func() // before each batch, outside its time: a new memory store
	close func()
}

// RunGatewayCost measures every front of GatewayFronts in front of one
// loopback upstream, with one client sending a keyed POST after another (a
// new key each), and reports the times per request and their ratios to the
// plain httputil.ReverseProxy. A front whose store cannot be reached is
// skipped, and the result says why.
func RunGatewayCost(ctx context.Context, cfg GatewayCostConfig) (GatewayCostResult, error) {
	if cfg.Rounds <= 0 || cfg.Batch <= 0 {
		return GatewayCostResult{}, fmt.Errorf("bench: RunGatewayCost: Rounds and Batch must be set")
	}
	upstream := newOverheadServer()
	defer upstream.Close()
	target, _ := url.Parse(upstream.URL)
	res := GatewayCostResult{Skipped: map[string]string{}}
	var fronts []gatewayFront
	defer func() {
		for _, f := range fronts {
			f.close()
		}
	}()
	for _, name := range GatewayFronts {
		f, err := newGatewayFront(ctx, name, target)
		if err != nil {
			res.Skipped[name] = err.Error()
			continue
		}
		fronts = append(fronts, f)
	}

	client := &http.Client{Transport: newBaseTransport()}
	defer client.CloseIdleConnections()
	key := int64(0)
	rng := rand.New(rand.NewPCG(8, 8)) // every run shuffles the rounds alike
	rounds, err := runRounds(len(fronts), cfg.Batch, cfg.Rounds, rng, func(i, n int) (blockResult, error) {
		f := fronts[i]
		f.fresh()
		r, err := runBlock(n, func() error {
			key++
			return gatewayPost(client, f.url, "gw-"+strconv.FormatInt(key, 10))
		})
		if err != nil {
			err = fmt.Errorf("bench: the gateway's cost, %s: %w", f.name, err)
		}
		return r, err
	})
	if err != nil {
		return GatewayCostResult{}, err
	}
	names := make([]string, len(fronts))
	for i, f := range fronts {
		names[i] = f.name
	}
	res.Ops, res.Rounds = rounds[0][0].n, cfg.Rounds
	res.Rows = costRows(names, rounds, GatewayPlainAgain)
	return res, nil
}

// costRows makes the rows of sections 8 and 9 from their rounds: each
// one's median time and allocations per request, its ratio to the first
// (the baseline) within each round, and the p-value of those ratios against
// noise's, the baseline measured again (1 for the baseline and noise).
func costRows(names []string, rounds [][]blockResult, noise string) []GatewayCostRow {
	ratios := make([][]float64, len(names))
	for i := range names {
		for k, r := range rounds[i] {
			ratios[i] = append(ratios[i], r.nsPerOp()/rounds[0][k].nsPerOp())
		}
	}
	n := slices.Index(names, noise)
	var rows []GatewayCostRow
	for i, name := range names {
		row := GatewayCostRow{Front: name, Ratio: spreadOf(ratios[i]), P: 1}
		var ns, allocs []float64
		for _, r := range rounds[i] {
			ns, allocs = append(ns, r.nsPerOp()), append(allocs, r.allocsPerOp())
		}
		row.NsPerOp, row.AllocsPerOp = median(ns), median(allocs)
		if i != 0 && i != n {
			row.P = mannWhitneyP(ratios[i], ratios[n])
		}
		rows = append(rows, row)
	}
	return rows
}

// newGatewayFront starts front name in front of target, on a loopback
// server of its own.
func newGatewayFront(ctx context.Context, name string, target *url.URL) (gatewayFront, error) {
	f := gatewayFront{name: name, fresh: func() {}, close: func() {}}
	var h http.Handler
	switch name {
	case GatewayPlain, GatewayPlainAgain, GatewayPlainFresh:
		p := httputil.NewSingleHostReverseProxy(target)
		if name == GatewayPlainFresh {
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.DisableKeepAlives = true
			p.Transport = tr
		}
		h = p
	case GatewayMemory, GatewayPass:
		var g *gateway.Gateway
		protect := []string{"POST /"}
		if name == GatewayPass {
			protect = []string{"POST /protected"}
		}
		f.fresh = func() { g = newBenchGateway(target, protect, memstore.New()) }
		f.fresh()
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.ServeHTTP(w, r) })
	case GatewayRedis:
		store, closeRedis, err := openGatewayRedis(ctx)
		if err != nil {
			return f, err
		}
		h, f.close = newBenchGateway(target, nil, store), closeRedis
	default:
		panic("bench: no gateway front " + name)
	}
	srv := httptest.NewServer(h)
	closeStore := f.close
	f.url = srv.URL + "/payments"
	f.close = func() { srv.Close(); closeStore() }
	return f, nil
}

// newBenchGateway is idem-server's gateway on its defaults (a 20 s upstream
// time-out, the key forwarded) over store, with a TTL that outlasts the run.
func newBenchGateway(target *url.URL, protect []string, store server.Store) *gateway.Gateway {
	g, err := gateway.New(gateway.Config{Upstream: target, Protect: protect, ForwardKey: true,
		UpstreamTimeout: 20 * time.Second, Middleware: []server.Option{server.WithTTL(10 * time.Minute)}}, store)
	if err != nil {
		panic(err)
	}
	return g
}

// openGatewayRedis returns a Redis store under a key prefix of its own, and
// the function that deletes its keys and closes the client.
func openGatewayRedis(ctx context.Context) (server.Store, func(), error) {
	addr := servicetest.RedisAddr()
	if err := dialEach(ctx, []string{addr}); err != nil {
		return nil, nil, fmt.Errorf("cannot reach Redis at %s (set %s): %w", addr, EnvRedisAddr, err)
	}
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	var b [6]byte
	_, _ = crand.Read(b[:])
	prefix := "idembench:gw:" + hex.EncodeToString(b[:]) + ":"
	return redisstore.New(client, redisstore.WithPrefix(prefix)), func() {
		_ = deletePrefix(client, prefix)
		_ = client.Close()
	}, nil
}

// gatewayPost sends one keyed POST with a bearer token (the gateway's
// default scope) and checks for the upstream's 201.
func gatewayPost(c *http.Client, url, key string) error {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(paymentBody))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer bench")
	req.Header.Set(server.HeaderKey, key)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	if err == nil && resp.StatusCode != http.StatusCreated {
		err = fmt.Errorf("status %d, want 201", resp.StatusCode)
	}
	return err
}
