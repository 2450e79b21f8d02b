package idem

import (
	"bytes"
	"context"
	"io"
	"net/http"
)

// bodyKind says how each attempt gets the request body.
type bodyKind uint8

const (
	bodyNone     bodyKind = iota // no body (nil or http.NoBody)
	bodyGetBody                  // the first attempt sends req.Body, later ones call req.GetBody
	bodyBuffered                 // every attempt reads the buffered bytes
	bodyOnce                     // the body can be sent once only
)

// replayBody is how one operation replays its request body.
//
// The rule: a body with GetBody is rewound with it. A body without GetBody
// whose length is known (ContentLength > 0) and at most the buffer limit is
// read into memory first, for as long as the caller's context allows, and
// replayed from there. Any other body is a stream and is sent once, as it is,
// never retried: a body longer than the limit, a body of unknown length
// (ContentLength -1 or 0: chunked, with its trailers, or a full-duplex
// stream whose producer waits for the response), or any body when the
// operation may not be retried at all.
type replayBody struct {
	kind     bodyKind
	buf      []byte        // bodyBuffered
	once     io.ReadCloser // bodyOnce: what the single attempt sends
	getBody  func() (io.ReadCloser, error)
	mismatch bool // the body's length is not its ContentLength: sent once, to fail as net/http fails
}

// newReplayBody decides how req's body is replayed; mayRetry says whether the
// operation may be retried at all. A read error, or the end of ctx while
// reading, is returned after closing req.Body.
func newReplayBody(ctx context.Context, req *http.Request, limit int64, mayRetry bool) (replayBody, error) {
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		return replayBody{kind: bodyNone}, nil
	case req.GetBody != nil:
		return replayBody{kind: bodyGetBody}, nil
	case !mayRetry || req.ContentLength <= 0 || req.ContentLength > limit:
		return replayBody{kind: bodyOnce, once: req.Body}, nil
	}
	// One byte more than announced tells a body longer than its ContentLength.
	buf, err := readContext(ctx, req.Body, req.ContentLength+1)
	if err != nil {
		_ = req.Body.Close()
		return replayBody{}, err
	}
	if int64(len(buf)) != req.ContentLength {
		return replayBody{kind: bodyOnce, mismatch: true, once: &prefixedBody{
			Reader: io.MultiReader(bytes.NewReader(buf), req.Body),
			Closer: req.Body,
		}}, nil
	}
	_ = req.Body.Close()
	return replayBody{kind: bodyBuffered, buf: buf}, nil
}

// readContext reads up to n bytes of r, and stops when ctx ends (closing r to
// unblock the read), returning its cause.
func readContext(ctx context.Context, r io.ReadCloser, n int64) ([]byte, error) {
	read := func() ([]byte, error) {
		var b bytes.Buffer
		b.Grow(int(min(n, 64<<10)))
		_, err := b.ReadFrom(io.LimitReader(r, n))
		return b.Bytes(), err
	}
	if ctx.Done() == nil {
		return read()
	}
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := read()
		done <- result{b, err}
	}()
	select {
	case res := <-done:
		return res.b, res.err
	case <-ctx.Done():
		_ = r.Close() // ends the read; the goroutine then exits
		return nil, context.Cause(ctx)
	}
}

// readAhead reports whether newReplayBody read the body, or its start,
// before any attempt: for as long as the reader took.
func (rb *replayBody) readAhead() bool {
	return rb.kind == bodyBuffered || rb.mismatch
}

// replayable reports whether the body can be sent more than once.
func (rb *replayBody) replayable() bool {
	return rb.kind != bodyOnce
}

// set gives the attempt's request r its body: for an attempt after the first
// with GetBody, next (from the next method).
func (rb *replayBody) set(r *http.Request, first bool, next io.ReadCloser) {
	switch rb.kind {
	case bodyGetBody:
		if !first {
			r.Body = next
		}
	case bodyBuffered:
		if rb.getBody == nil {
			buf := rb.buf
			rb.getBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
		}
		r.Body, _ = rb.getBody()
		r.GetBody = rb.getBody
	case bodyOnce:
		r.Body = rb.once
	}
}

// next returns the body of the next attempt when it comes from GetBody.
func (rb *replayBody) next(req *http.Request) (io.ReadCloser, error) {
	if rb.kind != bodyGetBody {
		return nil, nil
	}
	return req.GetBody()
}

// close closes the caller's body when no attempt will send it.
func (rb *replayBody) close(req *http.Request) {
	switch rb.kind {
	case bodyGetBody:
		closeRequestBody(req)
	case bodyOnce:
		_ = rb.once.Close()
	}
}

// prefixedBody is a request body whose start was read ahead.
type prefixedBody struct {
	io.Reader
	io.Closer
}

// closeRequestBody closes req's body, as a RoundTripper must even when it
// sends nothing.
func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
