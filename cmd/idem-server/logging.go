package main

import (
	"bufio"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/idemkit/idem/server"
)

// logRequests logs one line per request: method, path, status, key, replayed,
// duration_ms, and dropped when the connection was cut instead of answered.
func logRequests(logger *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			attrs := []slog.Attr{
				slog.String("method", r.Method),
				slog.String("path", r.URL.Path),
				slog.Int("status", sw.status),
				slog.String("key", r.Header.Get(server.HeaderKey)),
				slog.Bool("replayed", w.Header().Get(server.HeaderReplayed) == "true"),
				slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
			}
			if sw.hijacked {
				attrs = append(attrs, slog.Bool("dropped", true))
			}
			logger.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
		}()
		next.ServeHTTP(sw, r)
	})
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
