package bench

import (
	"bytes"
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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
// deadline gives the request a context deadline that far ahead.
func postPayment(ctx context.Context, c *http.Client, url, key string, deadline time.Duration) error {
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
)

// overheadTimeout is the deadline of the ContextDeadline and ClientTimeout cases.
const overheadTimeout = 10 * time.Second

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
	}
	return k + ", no deadline"
}

// OverheadCases returns the configurations of section 1: generated key and
// caller key, each with no deadline, a context deadline and
// http.Client{Timeout}.
func OverheadCases() []OverheadCase {
	var cs []OverheadCase
	for _, key := range []bool{false, true} {
		for _, d := range []OverheadDeadline{NoDeadline, ContextDeadline, ClientTimeout} {
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
	var next http.RoundTripper = memTransport{}
	if target == Loopback {
		tr := newBaseTransport()
		defer tr.CloseIdleConnections()
		next = tr
	}
	client := c.New(next)
	var deadline time.Duration
	switch cs.Deadline {
	case ContextDeadline:
		deadline = overheadTimeout
	case ClientTimeout:
		client.Timeout = overheadTimeout
	}
	key := ""
	if cs.CallerKey {
		key = overheadKey
	}
	ctx := context.Background()
	if err := postPayment(ctx, client, url, key, deadline); err != nil { // open the connection
		return err
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := postPayment(ctx, client, url, key, deadline); err != nil {
			return err
		}
	}
	return nil
}

// OverheadConfig sets up section 1.
type OverheadConfig struct {
	// BenchTime is each benchmark's -test.benchtime (for example 1s).
	BenchTime time.Duration
	// Rounds runs every contender this many times, interleaved; the median of
	// the rounds is reported, which damps the noise of a shared machine.
	Rounds int
}

// OverheadResult is one contender's median measurement in one case.
type OverheadResult struct {
	Target      OverheadTarget
	Case        OverheadCase
	Name        string
	NsPerOp     float64
	AllocsPerOp int64
	BytesPerOp  int64
	// NsRatio and AllocsRatio are relative to the first contender (bare) on
	// the same target, in the same case.
	NsRatio, AllocsRatio float64
}

// RunOverhead measures every contender with testing.Benchmark in every case
// of OverheadCases over loopback HTTP to one local server, then in the
// default case (generated key, no deadline) in memory, all in one run, and
// reports medians and ratios to the first contender (bare) of the same target
// and case. The rounds are interleaved: each round runs every contender once,
// so that the machine's load weighs on all alike.
func RunOverhead(cfg OverheadConfig, contenders []Contender) ([]OverheadResult, error) {
	if cfg.Rounds <= 0 || cfg.BenchTime <= 0 || len(contenders) == 0 {
		return nil, fmt.Errorf("bench: RunOverhead: Rounds, BenchTime and contenders must be set")
	}
	restore, err := setBenchTime(cfg.BenchTime)
	if err != nil {
		return nil, err
	}
	defer restore()
	srv := newOverheadServer()
	defer srv.Close()

	type run struct {
		target OverheadTarget
		cs     OverheadCase
	}
	var runs []run
	for _, cs := range OverheadCases() {
		runs = append(runs, run{Loopback, cs})
	}
	runs = append(runs, run{InMemory, OverheadCase{}})
	var out []OverheadResult
	for _, r := range runs {
		rows, err := overheadRows(cfg, contenders, r.target, srv.URL, r.cs)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}

// overheadRows measures every contender in one case over one target.
func overheadRows(cfg OverheadConfig, contenders []Contender, target OverheadTarget, url string, cs OverheadCase) ([]OverheadResult, error) {
	samples := make([][]testing.BenchmarkResult, len(contenders))
	for range cfg.Rounds {
		for i, c := range contenders {
			var failed error
			r := testing.Benchmark(func(b *testing.B) {
				if err := benchContender(b, c, target, url, cs); err != nil && failed == nil {
					failed = err
				}
			})
			if failed != nil {
				return nil, fmt.Errorf("bench: overhead %s over %v (%v): %w", c.Name, target, cs, failed)
			}
			if r.N == 0 {
				return nil, fmt.Errorf("bench: overhead %s over %v (%v): the benchmark did not run", c.Name, target, cs)
			}
			samples[i] = append(samples[i], r)
		}
	}
	rows := make([]OverheadResult, len(contenders))
	for i, c := range contenders {
		rs := samples[i]
		slices.SortFunc(rs, func(a, b testing.BenchmarkResult) int {
			return cmp.Compare(nsPerOp(a), nsPerOp(b))
		})
		m := rs[len(rs)/2]
		rows[i] = OverheadResult{
			Target:      target,
			Case:        cs,
			Name:        c.Name,
			NsPerOp:     nsPerOp(m),
			AllocsPerOp: m.AllocsPerOp(),
			BytesPerOp:  m.AllocedBytesPerOp(),
		}
	}
	for i := range rows {
		rows[i].NsRatio = rows[i].NsPerOp / rows[0].NsPerOp
		rows[i].AllocsRatio = float64(rows[i].AllocsPerOp) / float64(max(rows[0].AllocsPerOp, 1))
	}
	return rows, nil
}

// nsPerOp is r's time per operation without NsPerOp's rounding to whole ns.
func nsPerOp(r testing.BenchmarkResult) float64 {
	return float64(r.T.Nanoseconds()) / float64(r.N)
}

// setBenchTime sets the duration testing.Benchmark runs each benchmark for and
// returns a function that puts the previous setting back (in a test binary,
// the -test.benchtime the user gave). In a program that is not a test binary
// the testing flags are registered first.
func setBenchTime(d time.Duration) (restore func(), err error) {
	if flag.Lookup("test.benchtime") == nil {
		testing.Init()
	}
	f := flag.Lookup("test.benchtime")
	prev := f.Value.String()
	if err := f.Value.Set(d.String()); err != nil {
		return nil, fmt.Errorf("bench: setting the benchmark time: %w", err)
	}
	return func() { _ = f.Value.Set(prev) }, nil
}
