package bench

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"testing"
	"time"
)

// paymentBody is the small JSON body every overhead request posts.
var paymentBody = []byte(`{"customer":"cus_4242","amount":1999,"currency":"EUR"}`)

// paymentReply is what the overhead server answers.
var paymentReply = []byte(`{"id":"pay_1","customer":"cus_4242","amount":1999,"currency":"EUR"}` + "\n")

// newOverheadServer starts the local server of section 1: it reads the body and
// answers 201 with a small JSON document.
func newOverheadServer() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(paymentReply)
	}))
}

// overheadKey is the Idempotency-Key the caller sets in the caller-key cases.
const overheadKey = "6f1c1f0e-8a8e-4c4e-9a43-2b1d3c4e5f60"

// postPayment sends one POST through c and reads and closes the response. A
// non-empty key is set on the request's Idempotency-Key header; a non-zero
// deadline gives the request a context deadline that far ahead; extra are
// more header fields, names and values in turn.
func postPayment(ctx context.Context, c *http.Client, url, key string, deadline time.Duration, extra ...string) error {
	if deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, deadline)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(paymentBody))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	if err == nil && resp.StatusCode != http.StatusCreated {
		err = fmt.Errorf("bench: status %d, want 201", resp.StatusCode)
	}
	return err
}

// OverheadCase is one configuration users run: who sets the key, and how the
// request is bounded in time.
type OverheadCase struct {
	// CallerKey puts an Idempotency-Key on every request (the same for all
	// contenders); otherwise only idem sends one, which it generates.
	CallerKey bool
	// Deadline is how the request is bounded.
	Deadline OverheadDeadline
}

// OverheadDeadline is how a request of section 1 is bounded in time.
type OverheadDeadline int

const (
	// NoDeadline: no bound from the caller.
	NoDeadline OverheadDeadline = iota
	// ContextDeadline: a 10 s context deadline on every request.
	ContextDeadline
	// ClientTimeout: http.Client.Timeout of 10 s on the contender's client.
	ClientTimeout
	// OwnCap: like with like for a contender that bounds every operation
	// itself (Contender.Capped: idem's WithMaxElapsed): it runs with no
	// caller deadline and its own bound of overheadCap, and every other stack
	// is given the same bound as a context deadline on every request.
	OwnCap
)

// overheadTimeout is the deadline of the ContextDeadline and ClientTimeout cases.
const overheadTimeout = 10 * time.Second

// overheadCap is the bound of the OwnCap cases: idem's default WithMaxElapsed,
// set explicitly so that the case does not move with idem's defaults.
const overheadCap = 30 * time.Second

// String names the case in tables.
func (c OverheadCase) String() string {
	k := "generated key"
	if c.CallerKey {
		k = "caller key"
	}
	switch c.Deadline {
	case ContextDeadline:
		return k + ", context deadline"
	case ClientTimeout:
		return k + ", Client.Timeout"
	case OwnCap:
		return k + ", 30 s: idem's own cap, the others' context deadline"
	}
	return k + ", no deadline"
}

// OverheadCases returns the configurations of section 1: generated key and
// caller key, each with no deadline, a context deadline,
// http.Client{Timeout}, and idem capping itself beside the others given the
// same bound as a context deadline (OwnCap).
func OverheadCases() []OverheadCase {
	var cs []OverheadCase
	for _, key := range []bool{false, true} {
		for _, d := range []OverheadDeadline{NoDeadline, ContextDeadline, ClientTimeout, OwnCap} {
			cs = append(cs, OverheadCase{CallerKey: key, Deadline: d})
		}
	}
	return cs
}

// memTransport is an http.RoundTripper that answers every request in memory, as
// the overhead server does, with no network: it isolates the retry layer's own
// cost from the loopback's noise.
type memTransport struct{}

func (memTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	return &http.Response{
		Status:        "201 Created",
		StatusCode:    http.StatusCreated,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(paymentReply)),
		ContentLength: int64(len(paymentReply)),
		Request:       req,
	}, nil
}

// OverheadTarget is what the contenders send through in section 1.
type OverheadTarget int

const (
	// Loopback sends through an http.Transport to a local httptest server.
	Loopback OverheadTarget = iota
	// InMemory sends through memTransport: no network, only the retry layer.
	InMemory
)

// String names the target in tables.
func (t OverheadTarget) String() string {
	if t == InMemory {
		return "in-memory transport"
	}
	return "loopback HTTP"
}

// benchContender is the body of one overhead benchmark: b.N sequential POSTs
// through the contender's client to url, over target, in case cs. It stops at
// the first error and returns it.
func benchContender(b *testing.B, c Contender, target OverheadTarget, url string, cs OverheadCase) error {
	s := newOverheadStack(c, target, cs)
	defer s.close()
	ctx := context.Background()
	if err := postPayment(ctx, s.client, url, s.key, s.deadline); err != nil { // open the connection
		return err
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := postPayment(ctx, s.client, url, s.key, s.deadline); err != nil {
			return err
		}
	}
	return nil
}

// request returns the key and the context deadline that postPayment sets on
// every request of case c sent through contender ct ("" and 0: none).
func (c OverheadCase) request(ct Contender) (key string, deadline time.Duration) {
	if c.CallerKey {
		key = overheadKey
	}
	switch {
	case c.Deadline == ContextDeadline:
		deadline = overheadTimeout
	case c.Deadline == OwnCap && ct.Capped == nil:
		deadline = overheadCap
	}
	return key, deadline
}

// OverheadConfig sets up section 1.
type OverheadConfig struct {
	// Block is about how long each client stack runs in one round: the number
	// of requests per block is fixed for a configuration from a warm-up of
	// bare, and is the same for every stack.
	Block time.Duration
	// Rounds is how many times every stack runs one block, in an order shuffled
	// for each round: the ratios are taken within a round, between blocks that
	// ran a fraction of a second apart, so that the machine's load weighs on
	// all stacks alike.
	Rounds int
}

// ControlName names the control stack of every configuration of section 1:
// a second bare client, measured like the others, whose time ÷ bare's shows
// the noise of the measurement.
const ControlName = "bare (control)"

// OverheadResult is one contender's measurement in one configuration (target
// and case).
type OverheadResult struct {
	Target OverheadTarget
	Case   OverheadCase
	Name   string
	// NsPerOp is the median over the rounds; PerRound is every round's ns/op,
	// in round order, so that ratios can be taken within a round.
	NsPerOp  float64
	PerRound []float64
	// AllocsPerOp and BytesPerOp are the medians over the rounds; they include
	// the allocations of the loopback server, which runs in the same process.
	AllocsPerOp int64
	BytesPerOp  int64
	// NsRatio is the median over the rounds of the ratio to the first contender
	// (bare) in the same round; AllocsRatio the ratio of the allocations.
	NsRatio, AllocsRatio float64
}

// overheadStack is one client stack set up for one configuration, with the
// key and the context deadline its requests carry ("" and 0: none).
type overheadStack struct {
	name     string
	client   *http.Client
	key      string
	deadline time.Duration
	close    func()
}

// RunOverhead measures every contender, and the control (a second copy of the
// first contender, bare), in every case of OverheadCases, over loopback HTTP
// to one local server and then over the in-memory transport, all in one run,
// and reports medians and ratios to the first contender of the same
// configuration. Within a configuration the stacks run in rounds: each round
// runs every stack for one block of requests, in a shuffled order.
func RunOverhead(cfg OverheadConfig, contenders []Contender) ([]OverheadResult, error) {
	if cfg.Rounds <= 0 || cfg.Block <= 0 || len(contenders) == 0 {
		return nil, fmt.Errorf("bench: RunOverhead: Rounds, Block and contenders must be set")
	}
	srv := newOverheadServer()
	defer srv.Close()
	stacks := append(slices.Clone(contenders), Contender{Name: ControlName, New: contenders[0].New})
	// A fixed seed: every run shuffles the rounds the same way.
	rng := rand.New(rand.NewPCG(1, 2))
	var out []OverheadResult
	for _, target := range []OverheadTarget{Loopback, InMemory} {
		url := srv.URL
		if target == InMemory {
			url = "http://in-memory.invalid/payments"
		}
		for _, cs := range OverheadCases() {
			rows, err := overheadRows(cfg, stacks, target, url, cs, rng)
			if err != nil {
				return nil, err
			}
			out = append(out, rows...)
		}
	}
	return out, nil
}

// overheadRows measures every stack in one configuration.
func overheadRows(cfg OverheadConfig, contenders []Contender, target OverheadTarget, url string, cs OverheadCase, rng *rand.Rand) ([]OverheadResult, error) {
	stacks := make([]overheadStack, len(contenders))
	for i, c := range contenders {
		stacks[i] = newOverheadStack(c, target, cs)
		defer stacks[i].close()
	}
	rounds, err := runRounds(len(stacks), cfg.Block, cfg.Rounds, rng, func(i, n int) (blockResult, error) {
		s := stacks[i]
		r, err := runBlock(n, func() error {
			return postPayment(context.Background(), s.client, url, s.key, s.deadline)
		})
		if err != nil {
			err = fmt.Errorf("bench: overhead %s over %v (%v): %w", s.name, target, cs, err)
		}
		return r, err
	})
	if err != nil {
		return nil, err
	}

	rows := make([]OverheadResult, len(stacks))
	for i, s := range stacks {
		row := OverheadResult{Target: target, Case: cs, Name: s.name}
		var ratios, allocs, bytes []float64
		for k, r := range rounds[i] {
			row.PerRound = append(row.PerRound, r.nsPerOp())
			ratios = append(ratios, r.nsPerOp()/rounds[0][k].nsPerOp())
			allocs = append(allocs, r.allocsPerOp())
			bytes = append(bytes, r.bytesPerOp())
		}
		row.NsPerOp = median(row.PerRound)
		row.NsRatio = median(ratios)
		row.AllocsPerOp = int64(math.Round(median(allocs)))
		row.BytesPerOp = int64(math.Round(median(bytes)))
		rows[i] = row
	}
	for i := range rows {
		rows[i].AllocsRatio = float64(rows[i].AllocsPerOp) / float64(max(rows[0].AllocsPerOp, 1))
	}
	return rows, nil
}

// runRounds is how sections 1 and 7 measure k stacks: it warms each up (its
// connections, caches) with a tenth of a block's time, sizes the blocks from
// the speed of the first (the baseline), then runs rounds, each running every
// stack once for that number of operations, in an order rng shuffles for each
// round, so that the machine's drift weighs on every stack alike. It returns
// the blocks of every stack in round order ([stack][round]); run(i, n) runs n
// operations of stack i.
func runRounds(k int, block time.Duration, rounds int, rng *rand.Rand, run func(i, n int) (blockResult, error)) ([][]blockResult, error) {
	warm := max(block/10, time.Millisecond)
	n := 0
	for i := range k {
		r, err := run(i, 1)
		for err == nil && r.elapsed < warm {
			r, err = run(i, min(2*r.n, 1<<20))
		}
		if err != nil {
			return nil, err
		}
		if i == 0 {
			n = max(1, int(float64(r.n)*float64(block)/float64(r.elapsed)))
		}
	}
	out := make([][]blockResult, k)
	order := make([]int, k)
	for i := range order {
		order[i] = i
	}
	for range rounds {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			r, err := run(i, n)
			if err != nil {
				return nil, err
			}
			out[i] = append(out[i], r)
		}
	}
	return out, nil
}

// newOverheadStack returns c's client over target (over a loopback transport
// of its own), set up for case cs.
func newOverheadStack(c Contender, target OverheadTarget, cs OverheadCase) overheadStack {
	var next http.RoundTripper = memTransport{}
	closeIdle := func() {}
	if target == Loopback {
		tr := newBaseTransport()
		next, closeIdle = tr, tr.CloseIdleConnections
	}
	var client *http.Client
	if cs.Deadline == OwnCap && c.Capped != nil {
		client = c.Capped(next, overheadCap)
	} else {
		client = c.New(next)
	}
	if cs.Deadline == ClientTimeout {
		client.Timeout = overheadTimeout
	}
	key, deadline := cs.request(c)
	return overheadStack{name: c.Name, client: client, key: key, deadline: deadline, close: closeIdle}
}

// blockResult is what one block of requests took.
type blockResult struct {
	n               int
	elapsed         time.Duration
	mallocs, allocd uint64
}

func (r blockResult) nsPerOp() float64     { return float64(r.elapsed.Nanoseconds()) / float64(r.n) }
func (r blockResult) allocsPerOp() float64 { return float64(r.mallocs) / float64(r.n) }
func (r blockResult) bytesPerOp() float64  { return float64(r.allocd) / float64(r.n) }

// runBlock times n calls of op, after a garbage collection (as
// testing.Benchmark does, so that a block pays for the collections its own
// allocations cause, not for those of the block before it), and counts the
// allocations made meanwhile.
func runBlock(n int, op func() error) (blockResult, error) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	for range n {
		if err := op(); err != nil {
			return blockResult{}, err
		}
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	return blockResult{
		n:       n,
		elapsed: elapsed,
		mallocs: after.Mallocs - before.Mallocs,
		allocd:  after.TotalAlloc - before.TotalAlloc,
	}, nil
}

// quantile returns the q-quantile of xs, interpolated between the closest
// ranks, without changing xs.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// Spread summarises one ratio over the rounds of a configuration: its median
// and the quartiles (half the rounds lie between Q1 and Q3).
type Spread struct {
	Median, Q1, Q3 float64
}

func spreadOf(xs []float64) Spread {
	return Spread{Median: quantile(xs, 0.5), Q1: quantile(xs, 0.25), Q3: quantile(xs, 0.75)}
}

// noiseLevel is the p-value under which a comparison is outside the noise:
// benchstat's default.
const noiseLevel = 0.05

// OverheadComparison compares two contenders, A and B, in one configuration of
// section 1, measured in the same rounds, with the control of the same rounds.
type OverheadComparison struct {
	Target OverheadTarget
	Case   OverheadCase
	A, B   string
	Rounds int
	// Ratio is A's time ÷ B's within each round; Control is the control's
	// time ÷ bare's, two identical stacks: its spread is the noise.
	Ratio, Control Spread
	// P is the two-sided p-value of the Mann-Whitney U test of the rounds'
	// Ratio against the rounds' Control: how likely ratios this far from the
	// control's are when A and B cost the same.
	P float64
}

// minRounds is the fewest rounds from which a comparison is judged: with
// fewer, the test cannot tell a real difference from the noise.
const minRounds = 5

// WithinNoise reports whether the rounds' ratios A ÷ B cannot be told apart
// from those of two identical stacks (P at least 0.05), in at least minRounds
// rounds.
func (c OverheadComparison) WithinNoise() bool { return c.Rounds >= minRounds && c.P >= noiseLevel }

// Verdict says in words how A compares with B.
func (c OverheadComparison) Verdict() string {
	switch {
	case c.Rounds < minRounds:
		return "too few rounds to tell"
	case c.WithinNoise():
		return "within noise"
	case c.Ratio.Median > c.Control.Median:
		return c.A + " slower"
	default:
		return c.A + " faster"
	}
}

// CompareOverhead compares contenders a and b in every configuration of rows
// (as RunOverhead returns them), in the order the configurations come.
func CompareOverhead(rows []OverheadResult, a, b string) []OverheadComparison {
	type config struct {
		target OverheadTarget
		cs     OverheadCase
	}
	var configs []config
	find := make(map[config]map[string]OverheadResult)
	for _, r := range rows {
		k := config{r.Target, r.Case}
		if find[k] == nil {
			configs = append(configs, k)
			find[k] = make(map[string]OverheadResult)
		}
		find[k][r.Name] = r
	}
	var out []OverheadComparison
	for _, k := range configs {
		ra, okA := find[k][a]
		rb, okB := find[k][b]
		ctl, okC := find[k][ControlName]
		bare, okBare := find[k][rows[0].Name]
		if !okA || !okB || !okC || !okBare {
			continue
		}
		ratio := perRoundRatio(ra.PerRound, rb.PerRound)
		control := perRoundRatio(ctl.PerRound, bare.PerRound)
		out = append(out, OverheadComparison{
			Target: k.target, Case: k.cs, A: a, B: b, Rounds: len(ratio),
			Ratio: spreadOf(ratio), Control: spreadOf(control),
			P: mannWhitneyP(ratio, control),
		})
	}
	return out
}

// perRoundRatio returns num[i] / den[i] for every round i.
func perRoundRatio(num, den []float64) []float64 {
	out := make([]float64, min(len(num), len(den)))
	for i := range out {
		out[i] = num[i] / den[i]
	}
	return out
}

// mannWhitneyP returns the two-sided p-value of the Mann-Whitney U test of
// samples x and y (are values of one larger than those of the other more
// often than chance allows?), by the normal approximation with a continuity
// correction and the correction for ties; 1 when there is nothing to test.
func mannWhitneyP(x, y []float64) float64 {
	n1, n2 := float64(len(x)), float64(len(y))
	if n1 == 0 || n2 == 0 {
		return 1
	}
	type value struct {
		v     float64
		fromX bool
	}
	all := make([]value, 0, len(x)+len(y))
	for _, v := range x {
		all = append(all, value{v, true})
	}
	for _, v := range y {
		all = append(all, value{v, false})
	}
	slices.SortFunc(all, func(a, b value) int { return cmp.Compare(a.v, b.v) })
	// Rank sum of x, tied values sharing the mean of their ranks.
	var rankX, ties float64
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		rank := float64(i+j+1) / 2 // ranks i+1 .. j
		for _, v := range all[i:j] {
			if v.fromX {
				rankX += rank
			}
		}
		t := float64(j - i)
		ties += t*t*t - t
		i = j
	}
	n := n1 + n2
	u := rankX - n1*(n1+1)/2
	sd := math.Sqrt(n1 * n2 / 12 * (n + 1 - ties/(n*(n-1))))
	if sd == 0 {
		return 1
	}
	z := max(math.Abs(u-n1*n2/2)-0.5, 0) / sd
	return math.Erfc(z / math.Sqrt2)
}
