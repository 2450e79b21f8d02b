package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
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

// chunkSize is the size of the pooled chunks a body longer than
// preallocLimit (or of unknown length) is read into, before it is copied
// into one buffer of its exact length once it is whole.
const chunkSize = 32 << 10

// chunkPool keeps the chunks of bodies read, so that bodies refused or cut
// short mid-way leave no garbage behind: what the Limits' budget counts is
// what the process holds.
var chunkPool = sync.Pool{New: func() any { return new([chunkSize]byte) }}

// readBody reads the whole request body, at most max bytes, taking every
// byte of buffer it holds from lim's budget as it arrives; held is what the
// body still holds when it returns, which the caller gives back
// (lim.unreserve) once the body is no longer needed (nothing is held after an
// error). A declared Content-Length over max fails before anything is read; a
// body that cannot get its next bytes of buffer within the budget fails with
// errBusy.
//
// A body of a declared length up to preallocLimit is read into one buffer of
// that length. Any other is read into pooled chunks of chunkSize, each taken
// from the budget as the previous one fills, and copied, once whole, into one
// buffer of its length (taken from the budget too; the chunks go back to the
// pool and their bytes to the budget).
func readBody(r *http.Request, max int64, lim *Limits, arm func()) (body []byte, held int64, err error) {
	if r.ContentLength > max {
		return nil, 0, errBodyTooLarge
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, 0, nil
	}
	lr := &bodySource{lr: io.LimitedReader{R: r.Body, N: max + 1}, declared: r.ContentLength, arm: arm}
	if r.ContentLength >= 0 && r.ContentLength <= preallocLimit {
		size := r.ContentLength + 1 // +1: room to see EOF
		if !lim.reserve(size) {
			return nil, 0, errBusy
		}
		buf := make([]byte, 0, size)
		for len(buf) < cap(buf) {
			n, err := lr.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			switch {
			case err == io.EOF:
				return buf, size, nil
			case err != nil:
				lim.unreserve(size)
				return nil, 0, readError(err)
			}
		}
		// Longer than declared (a request built by hand, not one net/http
		// read): read on in chunks.
		body, held, err = readChunks(lr, buf, max, lim)
		lim.unreserve(size)
		return body, held, err
	}
	return readChunks(lr, nil, max, lim)
}

// readChunks reads the rest of a body, after first, into pooled chunks, each
// taken from lim's budget as the previous one fills, and copies it, once
// whole, into one buffer of its length, which it also takes from the budget
// (and returns as held); the chunks go back to the pool, their bytes to the
// budget.
func readChunks(lr *bodySource, first []byte, max int64, lim *Limits) (body []byte, held int64, err error) {
	var chunks []*[chunkSize]byte
	defer func() {
		for _, c := range chunks {
			chunkPool.Put(c)
		}
		lim.unreserve(int64(len(chunks)) * chunkSize)
	}()
	var total int64 // in the chunks
	for {
		if total == int64(len(chunks))*chunkSize {
			if !lim.reserve(chunkSize) {
				return nil, 0, errBusy
			}
			chunks = append(chunks, chunkPool.Get().(*[chunkSize]byte))
		}
		n, err := lr.Read(chunks[len(chunks)-1][total%chunkSize:])
		total += int64(n)
		switch {
		case int64(len(first))+total > max:
			return nil, 0, errBodyTooLarge
		case err == io.EOF:
			size := int64(len(first)) + total
			if !lim.reserve(size) {
				return nil, 0, errBusy
			}
			body := append(make([]byte, 0, size), first...)
			for _, c := range chunks {
				body = append(body, c[:min(chunkSize, size-int64(len(body)))]...)
			}
			return body, size, nil
		case err != nil:
			return nil, 0, readError(err)
		}
	}
}

// bodySource reads a body, at most lr.N bytes, calling arm once before a
// read that may wait for the client: any read after the first, unless every
// byte declared has arrived (net/http's body then answers EOF at once). A
// body that arrives whole in its first read, as most do, costs no watch.
type bodySource struct {
	lr       io.LimitedReader
	declared int64 // the Content-Length; -1 when unknown
	got      int64
	reads    int
	arm      func() // nil: nothing to arm, or armed
}

func (b *bodySource) Read(p []byte) (int, error) {
	if b.arm != nil && b.reads > 0 && (b.declared < 0 || b.got < b.declared) {
		b.arm()
		b.arm = nil
	}
	b.reads++
	n, err := b.lr.Read(p)
	b.got += int64(n)
	return n, err
}

// readError is the error of a failed read of the body: errBodyTooLarge for an
// outer http.MaxBytesReader's limit, err otherwise.
func readError(err error) error {
	if tooBig, ok := errors.AsType[*http.MaxBytesError](err); ok { // a limit in front of the middleware
		return fmt.Errorf("%w: %w", errBodyTooLarge, tooBig)
	}
	return err
}

// bodyLimitDetail is the 413's detail for err, a body past max or cut by a
// limit in front of the middleware (an *http.MaxBytesError): it names the
// limit that cut it.
func bodyLimitDetail(err error, max int64) string {
	if tooBig, ok := errors.AsType[*http.MaxBytesError](err); ok && tooBig.Limit > 0 {
		return fmt.Sprintf("the request body is limited to %d bytes", tooBig.Limit)
	}
	return fmt.Sprintf("the body of a request with an Idempotency-Key is limited to %d bytes", max)
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
// since this never sets a later one. The watch is armed only once a read may
// wait for the client (see bodySource). ex.held is the buffer budget the body
// holds.
func (ex *exchange) readBody(ctx context.Context) ([]byte, error) {
	lim := ex.p.cfg.limits
	var arm func()
	stop := func() bool { return false }
	if lim.timeout > 0 {
		arm = func() {
			rc := http.NewResponseController(ex.w)
			stop = context.AfterFunc(ctx, func() { _ = rc.SetReadDeadline(time.Now()) })
		}
	}
	body, held, err := readBody(ex.r, ex.p.cfg.maxBodyBytes, lim, arm)
	stop()
	ex.held = held
	return body, err
}

// bodyFailed answers a body that could not be read whole. The rest of the
// body is not read: the connection's read deadline is set to now, so that
// net/http, which would otherwise read up to 256 KiB of what is left to keep
// the connection (waiting, for a client that stalled, until its own
// ReadTimeout), closes it after the answer instead.
func (ex *exchange) bodyFailed(err error) {
	_ = http.NewResponseController(ex.w).SetReadDeadline(time.Now())
	switch {
	case errors.Is(err, errBodyTooLarge):
		ex.problem(Problem{Type: ProblemBodyTooLarge, Title: "Request body too large", Status: http.StatusRequestEntityTooLarge,
			Detail: bodyLimitDetail(err, ex.p.cfg.maxBodyBytes)}, err)
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
