package idem

import (
	"bytes"
	"io"
	"net/http"
)

// drainLimit is how much of a discarded response body is read so that its
// connection can be reused; a longer body is closed unread (the connection is
// then closed too, which costs less than reading it).
const drainLimit = 64 << 10

// bodyKind says how each attempt gets the request body.
type bodyKind uint8

const (
	bodyNone     bodyKind = iota // no body (nil or http.NoBody)
	bodyGetBody                  // the first attempt sends req.Body, later ones call req.GetBody
	bodyBuffered                 // every attempt reads the buffered bytes
	bodyOnce                     // the body can be sent once only
)

// replayBody is how one operation replays its request body.
type replayBody struct {
	kind bodyKind
	buf  []byte        // bodyBuffered
	once io.ReadCloser // bodyOnce: what the single attempt sends
}

// newReplayBody decides how req's body is replayed. When retrying is possible
// at all (mayRetry) and req has a body but no GetBody, up to limit bytes are
// read into memory: a body that fits is buffered (and req.Body closed), a larger
// one is sent once, its read part followed by the rest. A read error is
// returned after closing req.Body.
func newReplayBody(req *http.Request, limit int64, mayRetry bool) (replayBody, error) {
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		return replayBody{kind: bodyNone}, nil
	case req.GetBody != nil:
		return replayBody{kind: bodyGetBody}, nil
	case !mayRetry || limit == 0:
		return replayBody{kind: bodyOnce, once: req.Body}, nil
	}
	n := limit + 1
	if req.ContentLength > 0 && req.ContentLength < n {
		n = req.ContentLength + 1 // read to EOF without growing the buffer
	}
	var b bytes.Buffer
	b.Grow(int(min(n, 64<<10)))
	_, err := b.ReadFrom(io.LimitReader(req.Body, limit+1))
	if err != nil {
		req.Body.Close()
		return replayBody{}, err
	}
	if int64(b.Len()) > limit {
		return replayBody{kind: bodyOnce, once: &prefixedBody{
			Reader: io.MultiReader(bytes.NewReader(b.Bytes()), req.Body),
			Closer: req.Body,
		}}, nil
	}
	req.Body.Close()
	return replayBody{kind: bodyBuffered, buf: b.Bytes()}, nil
}

// replayable reports whether the body can be sent more than once.
func (rb *replayBody) replayable() bool {
	return rb.kind != bodyOnce
}

// prefixedBody is a request body whose start was read ahead.
type prefixedBody struct {
	io.Reader
	io.Closer
}

// bufferedBody returns a fresh reader of buf for one attempt.
func bufferedBody(buf []byte) io.ReadCloser {
	return io.NopCloser(bytes.NewReader(buf))
}

// discard drains up to drainLimit bytes of resp's body and closes it, so that
// the connection goes back to the pool.
func discard(resp *http.Response) {
	if resp == nil || resp.Body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
	_ = resp.Body.Close()
}

// closeRequestBody closes req's body, as a RoundTripper must even when it
// sends nothing.
func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
