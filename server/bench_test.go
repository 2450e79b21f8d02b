package server_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

// The benchmarks compare the middleware over the memory store with the bare
// handler, doing the same per-request setup in both, so that the difference
// in ns/op and allocs/op is what the middleware adds:
//
//	go test -run '^$' -bench . -benchmem ./server
//
// Read them as ratios: Middleware/executed against Bare, and so on.

var benchBody = []byte(`{"customer":"ada","amount":1000,"currency":"EUR"}`)
var benchResponse = []byte(`{"id":"pay_1","customer":"ada","amount":1000,"currency":"EUR"}` + "\n")

// benchHandler is a small JSON handler: reads the body, answers 201.
var benchHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Location", "/payments/pay_1")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(benchResponse)
})

// benchGzipHandler is benchHandler compressing its own answer: the record is
// in gzip.
func benchGzipHandler(b *testing.B) http.Handler {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(benchResponse)
	if err := zw.Close(); err != nil {
		b.Fatal(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Encoding", "gzip")
		h.Set("Vary", "Accept-Encoding")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(buf.Bytes())
	})
}

// discardWriter is a reusable ResponseWriter.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// benchClient holds one goroutine's reusable request and writer.
type benchClient struct {
	r      *http.Request
	w      *discardWriter
	body   bytes.Reader
	keyBuf []byte
	keyVal []string
}

func newBenchClient() *benchClient {
	r, _ := http.NewRequest(http.MethodPost, "http://example.com/payments", nil)
	c := &benchClient{r: r, w: &discardWriter{h: http.Header{}}, keyVal: make([]string, 1)}
	r.Header[server.HeaderKey] = c.keyVal
	return c
}

// do sends one request with key prefix+n (n < 0: the prefix alone).
func (c *benchClient) do(h http.Handler, prefix string, n int64) {
	if n >= 0 {
		c.keyBuf = strconv.AppendInt(append(c.keyBuf[:0], prefix...), n, 10)
		c.keyVal[0] = string(c.keyBuf)
	} else {
		c.keyVal[0] = prefix
	}
	c.body.Reset(benchBody)
	c.r.Body = io.NopCloser(&c.body)
	c.r.ContentLength = int64(len(benchBody))
	clear(c.w.h)
	h.ServeHTTP(c.w, c.r)
	if c.w.status != http.StatusCreated {
		panic("unexpected status " + strconv.Itoa(c.w.status))
	}
}

// runStore runs every request and records nothing: with it, a benchmark
// measures the middleware alone.
type runStore struct{}

func (runStore) Do(ctx context.Context, _ server.Request, run server.RunFunc) (server.Result, error) {
	resp, _ := run(ctx)
	return server.Result{Outcome: server.OutcomeExecuted, Response: resp}, nil
}

func newProtected(b *testing.B) http.Handler {
	store := memstore.New(memstore.WithMaxEntries(1 << 23))
	return server.Middleware(store)(benchHandler)
}

func BenchmarkBare(b *testing.B) {
	c := newBenchClient()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.do(benchHandler, "key-", int64(i))
	}
}

func BenchmarkMiddleware(b *testing.B) {
	b.Run("executed", func(b *testing.B) {
		h := newProtected(b)
		c := newBenchClient()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			c.do(h, "key-", int64(i))
		}
	})
	b.Run("executed_middleware_only", func(b *testing.B) {
		h := server.Middleware(runStore{})(benchHandler)
		c := newBenchClient()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			c.do(h, "key-", int64(i))
		}
	})
	b.Run("replayed", func(b *testing.B) {
		h := newProtected(b)
		c := newBenchClient()
		c.do(h, "key-0", -1)
		b.ReportAllocs()
		for b.Loop() {
			c.do(h, "key-0", -1)
		}
	})
	// A record in gzip, replayed to retries that accept it (as recorded) and
	// to retries that do not (decoded): against replayed, the cost of the
	// representation rules.
	for name, ae := range map[string][]string{"replayed_gzip_accepted": {"gzip, deflate, br"}, "replayed_gzip_decoded": nil} {
		b.Run(name, func(b *testing.B) {
			h := server.Middleware(memstore.New())(benchGzipHandler(b))
			c := newBenchClient()
			c.r.Header["Accept-Encoding"] = ae
			c.do(h, "key-0", -1)
			b.ReportAllocs()
			for b.Loop() {
				c.do(h, "key-0", -1)
			}
		})
	}
}

// runParallelNewKeys sends h a request with a new key on every iteration of
// every goroutine: the first-execution path, in parallel.
func runParallelNewKeys(b *testing.B, h http.Handler) {
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c := newBenchClient()
		prefix := "g" + strconv.FormatInt(next.Add(1), 10) + "-"
		for i := int64(0); pb.Next(); i++ {
			c.do(h, prefix, i)
		}
	})
}

func BenchmarkBareParallel(b *testing.B) { runParallelNewKeys(b, benchHandler) }

func BenchmarkMiddlewareParallel(b *testing.B) {
	b.Run("executed", func(b *testing.B) { runParallelNewKeys(b, newProtected(b)) })
	b.Run("replayed", func(b *testing.B) {
		h := newProtected(b)
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			c := newBenchClient()
			key := "g" + strconv.FormatInt(next.Add(1), 10)
			c.do(h, key, -1)
			for pb.Next() {
				c.do(h, key, -1)
			}
		})
	})
}
