package server

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
)

// ErrUnprotectable is returned to a protected handler that tries to hijack the
// connection, directly or through http.ResponseController: a hijacked
// connection cannot be recorded or replayed. The middleware then answers 500
// (ProblemUnprotectable) and releases the key, whatever the handler writes.
var ErrUnprotectable = errors.New("idem/server: a protected handler cannot hijack the connection")

// ErrResponseTooLarge is returned by Write to a protected handler whose
// response body goes past WithMaxResponseBytes: such a response cannot be
// recorded, so it is not sent either. The middleware answers 500
// (ProblemUnprotectable) and releases the key, as for any 5xx.
var ErrResponseTooLarge = errors.New("idem/server: response larger than the recordable limit")

// captureWriter is the http.ResponseWriter a protected handler writes to. It
// buffers the status, the headers and up to max bytes of body, and sends
// nothing until the middleware has the store's answer, so a response is never
// half stored. Flush is a no-op (the response goes out whole, after it is
// recorded). Hijack is refused (ErrUnprotectable). A body longer than max is
// refused (ErrResponseTooLarge): the buffer is dropped and the request is
// answered 500, never sent half or unrecorded.
type captureWriter struct {
	rw     http.ResponseWriter
	max    int64
	header http.Header
	status int // final status; 0 until WriteHeader or the first Write
	body   []byte
	// tooLarge: the body went past max; it was dropped.
	tooLarge bool
	// hijacked: the handler tried to hijack the connection and was refused.
	hijacked bool
	// undecodable: the response to record is in a content coding that could
	// not be replayed decoded (checkDecodable's error).
	undecodable error
}

var (
	_ http.ResponseWriter = (*captureWriter)(nil)
	_ http.Flusher        = (*captureWriter)(nil)
	_ http.Hijacker       = (*captureWriter)(nil)
)

// Header returns the handler's own header map; its entries are copied to the
// real response when the response is sent.
func (c *captureWriter) Header() http.Header {
	if c.header == nil {
		c.header = make(http.Header, 4)
	}
	return c.header
}

// WriteHeader records the final status. Informational (1xx) statuses are
// dropped: nothing can be sent before the response is recorded. Like net/http,
// it panics on a code outside 100..999 and ignores a second final status.
func (c *captureWriter) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if c.status != 0 || code < 200 {
		return
	}
	c.status = code
}

// Write buffers p (an implied 200 if no status was written).
func (c *captureWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if c.tooLarge || int64(len(c.body))+int64(len(p)) > c.max {
		c.refuse()
		return 0, ErrResponseTooLarge
	}
	c.body = append(c.body, p...)
	return len(p), nil
}

// WriteString is Write for a string, without a conversion.
func (c *captureWriter) WriteString(s string) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if c.tooLarge || int64(len(c.body))+int64(len(s)) > c.max {
		c.refuse()
		return 0, ErrResponseTooLarge
	}
	c.body = append(c.body, s...)
	return len(s), nil
}

// refuse drops a response that went past the limit.
func (c *captureWriter) refuse() {
	c.tooLarge = true
	c.body = nil
}

// Flush does nothing: the response is sent whole once it is recorded.
func (c *captureWriter) Flush() {}

// FlushError does nothing and reports success; http.ResponseController.Flush
// calls it.
func (c *captureWriter) FlushError() error { return nil }

// Hijack refuses: a hijacked connection cannot be recorded or replayed.
func (c *captureWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c.hijacked = true
	return nil, nil, ErrUnprotectable
}

// Unwrap returns the real ResponseWriter, so that http.ResponseController
// reaches its deadlines and full-duplex switches. Flush and Hijack stop here.
func (c *captureWriter) Unwrap() http.ResponseWriter { return c.rw }

// finalStatus is the status the handler's response has (200 when it wrote
// nothing at all, as net/http would send).
func (c *captureWriter) finalStatus() int {
	if c.status == 0 {
		return http.StatusOK
	}
	return c.status
}

// send writes the captured response to the client. The replay marker is
// never sent on a first execution, even if the handler set it, under any
// spelling of its name (a map key net/http would still send).
func (c *captureWriter) send() {
	copyHeader(c.rw.Header(), c.header)
	for k := range c.rw.Header() {
		if strings.EqualFold(k, HeaderReplayed) {
			delete(c.rw.Header(), k)
		}
	}
	c.rw.WriteHeader(c.finalStatus())
	if len(c.body) > 0 {
		_, _ = c.rw.Write(c.body)
	}
}

// record returns the response as the store records it: the status, the
// allow-listed headers (keys canonical), the representation headers whatever
// the allow-list (Content-Encoding and its Vary: the body is in that coding),
// and the body. The body buffer and the header value slices pass to the
// store, which must not modify them: the handler has returned and nothing
// else writes them. When every header the handler set is allow-listed, the
// handler's own map is passed.
func (c *captureWriter) record(allowed headerSet) *Response {
	h := c.header
	if !allowed.holdsAll(h) {
		h = representationHeaders(filterHeader(h, allowed), h)
	}
	return &Response{Status: c.finalStatus(), Header: h, Body: c.body}
}

// filterHeader returns the allow-listed fields of src under canonical keys,
// or nil if there are none.
func filterHeader(src http.Header, allowed headerSet) http.Header {
	var h http.Header
	for k, v := range src {
		ck := k
		if !allowed.has(ck) {
			if ck = http.CanonicalHeaderKey(k); !allowed.has(ck) {
				continue
			}
		}
		if h == nil {
			h = make(http.Header, len(allowed))
		}
		h[ck] = append(h[ck][:len(h[ck]):len(h[ck])], v...)
	}
	return h
}

// copyHeader sets every field of src on dst, replacing what dst had.
func copyHeader(dst, src http.Header) {
	for k, v := range src {
		dst[k] = slices.Clip(v)
	}
}

// replay answers the request with the stored response resp, in a content
// coding the request accepts (see forRetry): the recorded one, or identity.
// A record it cannot decode for a request that does not accept its coding
// (only an older version records one) is answered 406.
func (ex *exchange) replay(resp *Response) {
	out, err := forRetry(resp, ex.r.Header, ex.p.cfg.maxResponseBytes)
	if err != nil {
		ex.problem(Problem{Type: ProblemNotAcceptable, Title: "Recorded response not acceptable",
			Status: http.StatusNotAcceptable, Detail: fmt.Sprintf("the response recorded for this key is in a "+
				"content coding (%s) this request does not accept and the server cannot decode; "+
				"a request that accepts it gets the replay", strings.Join(resp.Header[hdrContentEncoding], ", "))}, err)
		return
	}
	writeStored(ex.w, out)
	ex.ev.Status = out.Status
	ex.emit()
}

// writeStored sends a stored response as a replay.
func writeStored(w http.ResponseWriter, resp *Response) {
	dst := w.Header()
	for k, v := range resp.Header {
		dst[k] = slices.Clip(v)
	}
	dst[HeaderReplayed] = []string{"true"}
	w.WriteHeader(resp.Status)
	if len(resp.Body) > 0 {
		_, _ = w.Write(resp.Body)
	}
}
