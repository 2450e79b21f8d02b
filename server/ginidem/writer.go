package ginidem

import (
	"bufio"
	"io"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"
)

// noWritten is the size of a response nothing was written to, as gin counts.
const noWritten = -1

// writer is the gin.ResponseWriter the protected chain writes to, over the
// middleware's capture writer. It keeps gin's semantics (a status can change
// until the header is written; Status, Size, Written; WriteHeaderNow), so
// c.JSON, c.Status and c.AbortWithStatus behave as without idem, while
// nothing reaches the client until the response is recorded.
type writer struct {
	http.ResponseWriter // the capture writer
	outer               gin.ResponseWriter
	status, size        int
}

var _ gin.ResponseWriter = (*writer)(nil)

func newWriter(capture http.ResponseWriter, outer gin.ResponseWriter) *writer {
	return &writer{ResponseWriter: capture, outer: outer, status: http.StatusOK, size: noWritten}
}

// WriteHeader sets the status, which a later call may change until the
// header is written (gin's rule).
func (w *writer) WriteHeader(code int) {
	if code > 0 && !w.Written() {
		w.status = code
	}
}

// WriteHeaderNow writes the header with the status set so far.
func (w *writer) WriteHeaderNow() {
	if !w.Written() {
		w.size = 0
		w.ResponseWriter.WriteHeader(w.status)
	}
}

func (w *writer) Write(p []byte) (int, error) {
	w.WriteHeaderNow()
	n, err := w.ResponseWriter.Write(p)
	w.size += n
	return n, err
}

func (w *writer) WriteString(s string) (int, error) {
	w.WriteHeaderNow()
	n, err := io.WriteString(w.ResponseWriter, s)
	w.size += n
	return n, err
}

func (w *writer) Status() int   { return w.status }
func (w *writer) Size() int     { return w.size }
func (w *writer) Written() bool { return w.size != noWritten }

// Flush writes the header; the body goes out whole once it is recorded.
func (w *writer) Flush() {
	w.WriteHeaderNow()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack is refused by the capture writer (server.ErrUnprotectable): a
// hijacked connection cannot be recorded.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// CloseNotify is the real connection's.
func (w *writer) CloseNotify() <-chan bool { return w.outer.CloseNotify() }

// Pusher is nil: a pushed response cannot be recorded.
func (w *writer) Pusher() http.Pusher { return nil }

// Unwrap returns the capture writer, for http.ResponseController.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
