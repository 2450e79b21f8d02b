package idemotel_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/idemkit/idem"
	idemotel "github.com/idemkit/idem/otel"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

// The cost of the instrumentation, as ratios to the same code without it,
// measured in the same run: rounds of the three variants interleaved, the
// median of each. "noop" uses the no-op providers (what the globals are until
// an SDK is installed); "sdk" the SDK's, with a ManualReader that aggregates
// every measurement and a TracerProvider that samples every span (and exports
// none). The client's next RoundTripper answers in memory and the middleware's
// handler does nothing, so that the ratios are the worst case; client-loopback
// sends each operation to a server on loopback, the least a real call costs.
// Run:
//
//	go test -run '^$' -bench Overhead -benchtime 15x ./otel/   # 15 rounds
func BenchmarkOverhead(b *testing.B) {
	for _, side := range []struct {
		name string
		mk   func(variant string) func() error
	}{{"client", clientOp}, {"middleware", middlewareOp}, {"client-loopback", loopbackOp}} {
		b.Run(side.name, func(b *testing.B) {
			// "off-again" is "off" measured twice: its ratio is the noise.
			variants := []string{"off", "noop", "off-again", "sdk"}
			ops := map[string]func() error{}
			for _, v := range variants {
				ops[v] = side.mk(v)
			}
			// Batches of n operations, n chosen so that one "off" batch takes
			// about 20ms; rounds of one batch per variant, interleaved, so
			// that the machine's drift touches every variant alike.
			n := 1
			for batch(b, ops["off"], n) < 20*time.Millisecond {
				n *= 2
			}
			ns := map[string][]float64{}
			for b.Loop() {
				for _, v := range variants {
					ns[v] = append(ns[v], float64(batch(b, ops[v], n).Nanoseconds())/float64(n))
				}
			}
			median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
			off := median(ns["off"])
			b.ReportMetric(off, "off-ns/op")
			b.ReportMetric(median(ns["off-again"])/off, "off-again/off")
			b.ReportMetric(median(ns["noop"])/off, "noop/off")
			b.ReportMetric(median(ns["sdk"])/off, "sdk/off")
		})
	}
}

// batch runs op n times and returns how long that took.
func batch(b *testing.B, op func() error, n int) time.Duration {
	start := time.Now()
	for range n {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// providers returns the idemotel options of a variant; nil for "off".
// "globals" uses the global providers, which are not the no-op ones but do
// what they do until an SDK is installed (no test of this package installs one).
func providers(variant string) []idemotel.Option {
	switch variant {
	case "globals":
		return []idemotel.Option{}
	case "noop":
		return []idemotel.Option{idemotel.WithTracerProvider(tracenoop.NewTracerProvider()),
			idemotel.WithMeterProvider(metricnoop.NewMeterProvider())}
	case "sdk":
		return []idemotel.Option{idemotel.WithTracerProvider(sdktrace.NewTracerProvider()),
			idemotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))}
	}
	return nil
}

// okTransport answers every request 200 in memory.
type okTransport struct{}

func (okTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: req,
		ProtoMajor: 1, ProtoMinor: 1}, nil
}

// clientOp returns one keyed operation through an idem.Transport, with the
// variant's instrumentation.
func clientOp(variant string) func() error {
	var rt http.RoundTripper = idem.NewTransport(okTransport{})
	if opts := providers(variant); opts != nil {
		c := idemotel.NewClient(opts...)
		rt = idem.NewTransport(c.Transport(okTransport{}), c.Option())
	}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://bench.test/payments", nil)
	req.Header.Set("Idempotency-Key", "bench-key")
	return func() error {
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
}

// loopback is a server answering 200 on loopback, for loopbackOp.
var loopback = sync.OnceValue(func() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
})

// loopbackOp is clientOp over a real connection, to a server on loopback.
func loopbackOp(variant string) func() error {
	srv := loopback()
	next := srv.Client().Transport
	var rt http.RoundTripper = idem.NewTransport(next)
	if opts := providers(variant); opts != nil {
		c := idemotel.NewClient(opts...)
		rt = idem.NewTransport(c.Transport(next), c.Option())
	}
	return func() error {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":1}`))
		req.Header.Set("Idempotency-Key", "bench-key")
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil
	}
}

var benchKeys atomic.Int64

// middlewareOp returns one request with a new key through the middleware
// over a memstore, with the variant's instrumentation.
func middlewareOp(variant string) func() error {
	var opts []server.Option
	if o := providers(variant); o != nil {
		opts = append(opts, idemotel.Server(append(o, idemotel.WithStoreName("memory"))...))
	}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", server.Middleware(memstore.New(), opts...)(http.HandlerFunc(
		func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })))
	return func() error {
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":1}`))
		r.Header.Set(server.HeaderKey, "k"+strconv.FormatInt(benchKeys.Add(1), 10))
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			return fmt.Errorf("status %d", w.Code)
		}
		return nil
	}
}

// TestBenchVariants: every variant of the benchmark works, so that its
// numbers are of working code.
func TestBenchVariants(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"off", "noop", "sdk", "globals"} {
		for name, mk := range map[string]func(string) func() error{"client": clientOp, "middleware": middlewareOp,
			"client-loopback": loopbackOp} {
			op := mk(v)
			for range 3 {
				if err := op(); err != nil {
					t.Errorf("%s %s: %v", name, v, err)
				}
			}
		}
	}
}
