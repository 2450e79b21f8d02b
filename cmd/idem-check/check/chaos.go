package check

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// loseHeader asks the chaos proxy to lose the answer of this request; the
// proxy removes it before forwarding.
const loseHeader = "Idem-Check-Lose-Response"

// lossyProxy forwards every request it gets to the one target URL and, for
// a request marked with loseHeader, reads the target's whole answer (the
// server has acted) and then closes the client's connection instead of
// answering: the lost response of a time-out or a dropped connection.
type lossyProxy struct {
	target string
	method string
	rt     http.RoundTripper
	srv    *http.Server
	ln     net.Listener
	done   chan struct{}
}

// startProxy listens on a loopback port of the system's choice.
func startProxy(target, method string, rt http.RoundTripper) (*lossyProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos proxy: %w", err)
	}
	p := &lossyProxy{target: target, method: method, rt: rt, ln: ln, done: make(chan struct{})}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

func (p *lossyProxy) URL() string { return "http://" + p.ln.Addr().String() + "/" }

func (p *lossyProxy) Close() {
	_ = p.srv.Close()
	<-p.done
}

func (p *lossyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		http.Error(w, "chaos proxy: reading the request: "+err.Error(), http.StatusBadGateway)
		return
	}
	lose := r.Header.Get(loseHeader) != ""
	out, err := http.NewRequestWithContext(r.Context(), p.method, p.target, bytes.NewReader(body))
	if err != nil {
		http.Error(w, "chaos proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	for k, vs := range r.Header {
		switch k {
		case loseHeader, "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
			continue
		}
		out.Header[k] = vs
	}
	resp, err := p.rt.RoundTrip(out)
	if err != nil {
		http.Error(w, "chaos proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	resp.Body.Close()
	if lose || err != nil {
		// The server answered (it acted); the client never hears it.
		panic(http.ErrAbortHandler)
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

// A chaos fault: how one operation's requests are sent through the proxy.
type fault struct {
	id, title string
	requests  func(c *Config) int // the most requests of one operation
	// run sends one operation's requests under key.
	run func(ctx context.Context, r *runner, p *lossyProxy, client *http.Client, op operation) []*exchange
}

// retriesAfterLoss bounds the retries of an operation whose answer was lost.
const retriesAfterLoss = 2

var faults = []fault{
	{
		id: "chaos-lost-response", title: "the answer is lost after the server acted; the client retries with the same key",
		requests: func(*Config) int { return 1 + retriesAfterLoss },
		run: func(ctx context.Context, r *runner, p *lossyProxy, client *http.Client, op operation) []*exchange {
			exs := []*exchange{r.send(ctx, reqOpts{keys: []string{op.key}, op: op.id, base: p.URL(), client: client,
				extra: []http.Header{{loseHeader: {"1"}}}})}
			for range retriesAfterLoss {
				ex := r.send(ctx, reqOpts{keys: []string{op.key}, op: op.id, base: p.URL(), client: client})
				exs = append(exs, ex)
				if ex.err == nil {
					break
				}
			}
			return exs
		},
	},
	{
		id: "chaos-concurrent", title: "concurrent duplicates with the same key",
		requests: func(c *Config) int { return c.Duplicates },
		run: func(ctx context.Context, r *runner, p *lossyProxy, client *http.Client, op operation) []*exchange {
			return concurrently(ctx, r, p, client, op, r.cfg.Duplicates)
		},
	},
	{
		id: "chaos-lost-then-concurrent", title: "the answer is lost, then concurrent retries with the same key",
		requests: func(c *Config) int { return 1 + c.Duplicates },
		run: func(ctx context.Context, r *runner, p *lossyProxy, client *http.Client, op operation) []*exchange {
			first := r.send(ctx, reqOpts{keys: []string{op.key}, op: op.id, base: p.URL(), client: client,
				extra: []http.Header{{loseHeader: {"1"}}}})
			return append([]*exchange{first}, concurrently(ctx, r, p, client, op, r.cfg.Duplicates)...)
		},
	},
}

// concurrently sends n requests of op at once (they start together).
func concurrently(ctx context.Context, r *runner, p *lossyProxy, client *http.Client, op operation, n int) []*exchange {
	exs := make([]*exchange, n)
	// The slow headers, when given, keep the first in progress while the
	// others arrive.
	var slow []http.Header
	if len(r.cfg.Slow) > 0 {
		slow = []http.Header{r.cfg.Slow}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			exs[i] = r.send(ctx, reqOpts{keys: []string{op.key}, op: op.id, base: p.URL(), client: client, extra: slow})
		})
	}
	close(start)
	wg.Wait()
	return exs
}

func chaosScenarios(c *Config) []scenario {
	var list []scenario
	for _, f := range faults {
		list = append(list, scenario{
			requests: c.Operations * f.requests(c),
			reads:    c.Operations * 2,
			run:      func(ctx context.Context, r *runner) []Row { return runFault(ctx, r, f) },
		})
	}
	return list
}

func runFault(ctx context.Context, r *runner, f fault) []Row {
	row := Row{ID: f.id, Title: f.title, Source: srcChaos,
		Expected: fmt.Sprintf("%d operation(s), one effect each: 0 duplicates", r.cfg.Operations)}
	if r.cfg.Effect == nil {
		return row.skipped("no effect to count (give -effect-url and -effect-json, or -effect-cmd)")
	}
	p, err := startProxy(r.cfg.URL, r.cfg.Method, r.counter)
	if err != nil {
		return row.skipped(err.Error())
	}
	defer p.Close()
	// Keep-alives off: net/http resends a keyed request by itself when a
	// reused connection closes before the answer, which would hide the loss.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}, CheckRedirect: noRedirects}
	var effects []string
	duplicates, unseen := 0, 0
	var worst []*exchange
	for range r.cfg.Operations {
		op := r.newOperation()
		before, ok, err := r.count(ctx, op.id)
		if !ok {
			return row.skipped("counting the effect failed: " + err.Error())
		}
		exs := f.run(ctx, r, p, client, op)
		after, ok, err := r.count(ctx, op.id)
		if !ok {
			return row.skipped("counting the effect failed: " + err.Error())
		}
		n := after - before
		effects = append(effects, fmt.Sprint(n))
		switch {
		case n > 1:
			duplicates += int(n - 1)
			worst = exs
		case n == 0:
			unseen++
			if worst == nil {
				worst = exs
			}
		}
	}
	row.Got = fmt.Sprintf("effects per operation: %s; %d duplicate(s)", strings.Join(effects, ", "), duplicates)
	switch {
	case duplicates > 0:
		row.Verdict = Fail
	case unseen > 0:
		row.Verdict = Warn
		row.Got += fmt.Sprintf("; %d operation(s) with no effect counted", unseen)
	default:
		row.Verdict = Pass
	}
	if row.Verdict != Pass {
		row.Evidence = evidence(worst...)
	}
	return []Row{row}
}
