package main

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/internal/demo/cause"
	"github.com/idemkit/idem/server"
)

// logRequests logs one line per request: method, path, status, key (as
// server.LogKey cuts it), replayed, duration_ms, dropped when the connection was cut
// instead of answered, and, at level WARN, store_error when the idempotency
// store failed (the cause of its 503 or outcome-unknown answer) and cause for
// any other 5xx: the error the demo reported (a ledger that failed, a store
// that did not answer /readyz's Ping), or else the problem's detail. Every
// 503 names its cause.
func logRequests(logger *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		note := &storeErrorNote{}
		ctx := context.WithValue(r.Context(), storeErrorKey{}, note)
		r = r.WithContext(cause.With(ctx, note.setCause))
		defer func() {
			level := slog.LevelInfo
			attrs := []slog.Attr{
				slog.String("method", r.Method),
				slog.String("path", r.URL.Path),
				slog.Int("status", sw.status),
				slog.String("key", server.LogKey(r.Header.Get(server.HeaderKey))),
				slog.Bool("replayed", w.Header().Get(server.HeaderReplayed) == "true"),
				slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
			}
			if sw.hijacked {
				attrs = append(attrs, slog.Bool("dropped", true))
			}
			storeErr, causeErr := note.get()
			if storeErr != nil {
				level = slog.LevelWarn
				attrs = append(attrs, slog.String("store_error", storeErr.Error()))
			}
			if storeErr == nil && sw.status >= 500 {
				level = slog.LevelWarn
				attrs = append(attrs, slog.String("cause", answerCause(causeErr, sw.head)))
			}
			logger.LogAttrs(r.Context(), level, "request", attrs...)
		}()
		next.ServeHTTP(sw, r)
	})
}

// storeErrorKey is the context key of a request's *storeErrorNote.
type storeErrorKey struct{}

// storeErrorNote holds the last error the store returned for one request,
// and the last cause the demo reported (package cause).
type storeErrorNote struct {
	mu    sync.Mutex
	err   error
	cause error
}

func (n *storeErrorNote) set(err error) {
	n.mu.Lock()
	n.err = err
	n.mu.Unlock()
}

func (n *storeErrorNote) setCause(err error) {
	n.mu.Lock()
	n.cause = err
	n.mu.Unlock()
}

func (n *storeErrorNote) get() (storeErr, cause error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err, n.cause
}

// maxLoggedHead is how much of a 5xx body the log keeps, to read its detail.
const maxLoggedHead = 2048

// answerCause is the cause of a 5xx: the reported error, else the detail (or
// title) of the problem body, else that nothing says.
func answerCause(reported error, head []byte) string {
	if reported != nil {
		return reported.Error()
	}
	var p struct{ Title, Detail string }
	if json.Unmarshal(head, &p) == nil && (p.Detail != "" || p.Title != "") {
		return strings.TrimSpace(p.Title + ": " + p.Detail)
	}
	return "not reported (the body is not a problem with a detail)"
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

// statusWriter remembers the status sent, the start of a 5xx body, and
// whether the connection was taken.
type statusWriter struct {
	http.ResponseWriter
	status   int
	head     []byte
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
	if w.status >= 500 && len(w.head) < maxLoggedHead {
		w.head = append(w.head, b[:min(len(b), maxLoggedHead-len(w.head))]...)
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
