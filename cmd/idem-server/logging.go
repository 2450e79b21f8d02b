package main

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/idemkit/idem/server"
)

// logRequests logs one line per request: method, path, status, key (at most
// maxLoggedKey bytes), replayed, duration_ms, dropped when the connection was cut
// instead of answered, and store_error, at level WARN, when the idempotency
// store failed (the cause of its 503 or outcome-unknown answer).
func logRequests(logger *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		note := &storeErrorNote{}
		r = r.WithContext(context.WithValue(r.Context(), storeErrorKey{}, note))
		defer func() {
			level := slog.LevelInfo
			attrs := []slog.Attr{
				slog.String("method", r.Method),
				slog.String("path", r.URL.Path),
				slog.Int("status", sw.status),
				slog.String("key", truncateKey(r.Header.Get(server.HeaderKey))),
				slog.Bool("replayed", w.Header().Get(server.HeaderReplayed) == "true"),
				slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
			}
			if sw.hijacked {
				attrs = append(attrs, slog.Bool("dropped", true))
			}
			if err := note.get(); err != nil {
				level = slog.LevelWarn
				attrs = append(attrs, slog.String("store_error", err.Error()))
			}
			logger.LogAttrs(r.Context(), level, "request", attrs...)
		}()
		next.ServeHTTP(sw, r)
	})
}

// maxLoggedKey bounds the Idempotency-Key in a log line: a client chooses it.
const maxLoggedKey = 64

func truncateKey(k string) string {
	if len(k) <= maxLoggedKey {
		return k
	}
	return k[:maxLoggedKey] + "...(" + strconv.Itoa(len(k)) + " bytes)"
}

// storeErrorKey is the context key of a request's *storeErrorNote.
type storeErrorKey struct{}

// storeErrorNote holds the last error the store returned for one request.
type storeErrorNote struct {
	mu  sync.Mutex
	err error
}

func (n *storeErrorNote) set(err error) {
	n.mu.Lock()
	n.err = err
	n.mu.Unlock()
}

func (n *storeErrorNote) get() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// notingStore notes every error of the store it wraps in the request's
// storeErrorNote (when logRequests put one in the context).
type notingStore struct{ server.Store }

func (s notingStore) Do(ctx context.Context, req server.Request, run server.RunFunc) (server.Result, error) {
	res, err := s.Store.Do(ctx, req, run)
	if n, ok := ctx.Value(storeErrorKey{}).(*storeErrorNote); ok && err != nil {
		n.set(err)
	}
	return res, err
}

// Ping passes the readiness check on to the wrapped store (server.Pinger); a
// store without one is ready.
func (s notingStore) Ping(ctx context.Context) error {
	if p, ok := s.Store.(server.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// statusWriter remembers the status sent and whether the connection was taken.
type statusWriter struct {
	http.ResponseWriter
	status   int
	hijacked bool
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Hijack records the takeover (chaos drops use it) and passes it on.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked = true
	}
	return conn, rw, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
