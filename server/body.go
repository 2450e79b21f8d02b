package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// errBodyTooLarge reports a request body over the configured limit.
var errBodyTooLarge = errors.New("idem/server: request body too large")

// errBusy reports a request body that does not fit in what is left of the
// Limits' buffer budget.
var errBusy = errors.New("idem/server: the buffer for request bodies is full")

// preallocLimit bounds what readBody allocates up front on the word of a
// declared Content-Length; a longer body grows the buffer as it arrives, so
// memory follows the bytes received, not the bytes declared (a client that
// declares 1 MiB and sends nothing costs 16 KiB, not 1 MiB).
const preallocLimit = 16 << 10

// readBody reads the whole request body, at most max bytes, taking every
// byte of buffer it allocates from lim's budget as it grows; held is what it
// took, which the caller gives back (lim.unreserve) once the body is no
// longer needed, also when err is not nil. A declared Content-Length over max
// fails before anything is read; a buffer that cannot grow within the budget
// fails with errBusy.
func readBody(r *http.Request, max int64, lim *Limits) (body []byte, held int64, err error) {
	if r.ContentLength > max {
		return nil, 0, errBodyTooLarge
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, 0, nil
	}
	size := min(max+1, 512)
	if r.ContentLength >= 0 {
		size = min(r.ContentLength, preallocLimit) + 1 // +1: room to see EOF without growing
	}
	if !lim.reserve(size) {
		return nil, 0, errBusy
	}
	held = size
	buf := make([]byte, 0, size)
	lr := io.LimitedReader{R: r.Body, N: max + 1}
	for {
		if len(buf) == cap(buf) {
			grown := min(growth(int64(cap(buf))), max+1)
			if !lim.reserve(grown - int64(cap(buf))) {
				return nil, held, errBusy
			}
			held += grown - int64(cap(buf))
			buf = append(make([]byte, 0, grown), buf...)
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > max {
			return nil, held, errBodyTooLarge
		}
		if err == io.EOF {
			return buf, held, nil
		}
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				return nil, held, errBodyTooLarge
			}
			return nil, held, err
		}
	}
}

// growth is the next capacity of a body buffer of capacity c: twice c up to
// 64 KiB, then a quarter more, so that what the buffer holds (which the
// Limits' budget counts) stays within a quarter of the bytes received.
func growth(c int64) int64 {
	if c < 64<<10 {
		return 2 * c
	}
	return c + c/4
}

// bodyReader is the fresh request body a protected handler reads: the bytes
// the fingerprint was computed from.
type bodyReader struct {
	bytes.Reader
}

// Close does nothing.
func (*bodyReader) Close() error { return nil }

// readBody reads the request's body within ctx's deadline (the Limits'
// request time): when ctx ends first, the connection's read deadline is set
// to that moment, which ends the read with os.ErrDeadlineExceeded; a read
// deadline of the server's own (ReadTimeout) that comes earlier still holds,
// since this never sets a later one. ex.held is the buffer budget the body
// holds.
func (ex *exchange) readBody(ctx context.Context) ([]byte, error) {
	lim := ex.p.cfg.limits
	if lim.timeout > 0 {
		rc := http.NewResponseController(ex.w)
		stop := context.AfterFunc(ctx, func() { _ = rc.SetReadDeadline(time.Now()) })
		defer stop()
	}
	body, held, err := readBody(ex.r, ex.p.cfg.maxBodyBytes, lim)
	ex.held = held
	return body, err
}

// bodyFailed answers a body that could not be read whole.
func (ex *exchange) bodyFailed(err error) {
	switch {
	case errors.Is(err, errBodyTooLarge):
		ex.problem(Problem{Type: ProblemBodyTooLarge, Title: "Request body too large", Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("the body of a request with an Idempotency-Key is limited to %d bytes", ex.p.cfg.maxBodyBytes)}, err)
	case errors.Is(err, errBusy):
		ex.problem(Problem{Type: ProblemBusy, Title: "Server busy", Status: http.StatusServiceUnavailable,
			RetryAfter: busyRetryAfter,
			Detail:     "the server holds as many request bodies as it can at once; the request was not processed, retry with the same Idempotency-Key"}, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		ex.problem(Problem{Type: ProblemBodyUnreadable, Title: "Request body too slow", Status: http.StatusRequestTimeout,
			Detail: "the request body did not arrive within the request's time limit; the request was not processed"}, err)
	default:
		ex.problem(Problem{Type: ProblemBodyUnreadable, Title: "Request body unreadable", Status: http.StatusBadRequest,
			Detail: "the request body could not be read"}, err)
	}
}
