package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The connections of protected requests, and why a protected request reaches
// the upstream at most once on them.
//
// net/http's Transport sends a request again, on another connection, in two
// cases only (transport.go, shouldRetryRequest; HTTP/2's own case does not
// arise, HTTP/2 is never spoken here), and only after a connection it reused
// failed; a failure on a new connection is returned as it is:
//
//  1. Nothing of the request was written (nothingWrittenError: every write
//     of it on the connection wrote zero bytes), and its body is empty or
//     GetBody can make it again. The upstream received none of it, so the
//     request sent again is the first it sees. (Over TLS a write is counted
//     in whole records: bytes of a record cut short cannot be decrypted, so
//     the upstream cannot act on them either.)
//  2. Bytes may have left, the connection failed before the answer's first
//     byte (a read error, or the EOF of a server that closed an idle
//     connection), and the request is replayable (request.go, isReplayable):
//     its body is empty or has GetBody, and its method is GET, HEAD,
//     OPTIONS, TRACE or empty, or its header map holds the key
//     "Idempotency-Key" or "X-Idempotency-Key" (looked up as spelled, not
//     canonicalized). An upstream that acted and then died would act twice.
//
// So a protected request goes on a kept-alive connection (the reuse
// transport) only when case 2 cannot apply to it and case 1 can (reusable):
// its method is none of those four; its header map holds neither of those
// two keys, because rewrite writes the forwarded key, and any header of
// either name the caller sent, under the name in lower case (header names
// are case-insensitive, and net/http writes an HTTP/1.1 header as its map
// key spells it); and its body is empty or has GetBody, which rewrite sets
// over the body the middleware buffered. Every other protected request (one
// of a -protect pattern for GET, say) goes on a new connection of its own
// (the fresh transport), which net/http never sends again; so does every
// protected request where peerGone cannot look at a connection
// (checksIdleConns, below).
//
// What left is counted, not guessed. Each connection counts the bytes
// written on it (upstreamConn), and a forward whose transport failed counts
// as sent (the upstream may have acted: outcome-unknown) only when a byte
// was written for it on the connection it got last. None was on an earlier
// one: the reuse transport sends a request again only by case 1, after an
// attempt that wrote nothing, and the fresh transport never does. A dial
// that fails, a new connection that fails before the request's first byte,
// or a reused one found closed with nothing written followed by a dial that
// fails, is "nothing sent": upstream-unreachable, the key released. (The
// error comes back only once the transport's writer has stopped,
// ResponseHeaderTimeout being 0: the count is final when it is read.)
//
// A reused connection may be one the upstream closed (its idle time-out, a
// restart) before the Transport read the close: the request, written on it,
// would be answered by a reset after it had left, and be outcome-unknown
// although the upstream never read it. So the first write of a request on a
// reused connection first looks whether the upstream's FIN, a reset or bytes
// nobody asked for are waiting there (peerGone, a peek that neither takes
// nor waits): if so the write fails having written nothing, the Transport
// closes the connection, and case 1 sends the request on another one. What
// is left is an upstream that closes the connection while the request is on
// its way to it (the FIN and the request cross): outcome-unknown, as it must
// be, since nothing tells that upstream from one that read the request,
// acted and died; idleTimeout, shorter than the idle time-outs of the common
// servers, keeps the gateway from offering a request to an upstream about to
// close an idle connection. And a close the Transport reads itself between
// taking the connection and writing on it fails the request with nothing
// written ("server closed idle connection", which case 1 does not cover):
// upstream-unreachable, the key released, a retry safe.

// idleTimeout is how long an idle connection to the upstream is kept: under
// the idle time-outs of the common HTTP servers (gunicorn 2 s, Node.js,
// uvicorn and Apache 5 s, nginx 75 s), so that the gateway closes an idle
// connection before the upstream does.
const idleTimeout = time.Second

// maxIdleConns is how many idle connections to the upstream the reuse
// transport keeps (the default, 2 per host, would close most of them when
// protected requests run at once).
const maxIdleConns = 100

// dialFunc dials the upstream (net.Dialer.DialContext's shape).
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// upstreamTransport returns a transport of protected requests: HTTP/1.1
// only, no proxy, dialing with dial (nil: net/http's default dialer), on
// connections that count what is written on them, checking an https
// upstream's certificate against roots (nil: the system's); with keepAlive,
// idle connections are kept idleTimeout, else each request has a new one.
func upstreamTransport(dial dialFunc, roots *x509.CertPool, keepAlive bool) *http.Transport {
	tr := baseTransport(roots)
	if dial == nil {
		dial = tr.DialContext
	}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &upstreamConn{Conn: c}, nil
	}
	var http1 http.Protocols
	http1.SetHTTP1(true)
	tr.Protocols = &http1
	tr.DisableKeepAlives = !keepAlive
	tr.IdleConnTimeout = idleTimeout
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = maxIdleConns, maxIdleConns
	return tr
}

// baseTransport is what every transport to the upstream starts from:
// net/http's default, without a proxy (the upstream is next to the gateway:
// no HTTP_PROXY detour), checking an https upstream's certificate against
// roots (nil: the system's).
func baseTransport(roots *x509.CertPool) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	if roots != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	}
	return tr
}

// reusable reports whether net/http may carry out on a kept-alive
// connection without ever sending it twice: it is not replayable (case 2
// above) and it can be sent again when nothing of it was written (case 1).
func reusable(out *http.Request) bool {
	switch out.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	}
	for _, name := range replayableKeys {
		if _, ok := out.Header[name]; ok {
			return false
		}
	}
	rewindable := out.Body == nil || out.Body == http.NoBody || out.GetBody != nil
	return checksIdleConns && rewindable
}

// replayableKeys are the header map keys that make net/http's isReplayable
// call a request idempotent.
var replayableKeys = []string{"Idempotency-Key", "X-Idempotency-Key"}

// hideReplayableKeys moves the headers of h under replayableKeys to their
// names in lower case, which isReplayable does not look up and the upstream
// reads as the same headers.
func hideReplayableKeys(h http.Header) {
	for _, name := range replayableKeys {
		if vs, ok := h[name]; ok {
			delete(h, name)
			lower := strings.ToLower(name)
			h[lower] = append(h[lower], vs...)
		}
	}
}

// setGetBody gives the outbound request pr.Out a GetBody, and a body read
// through it, when the inbound request's body is the buffer server.Middleware
// hands its handler (the bytes it read whole, readable again from any
// offset: an io.ReaderAt with a Size; httputil.ReverseProxy has wrapped
// pr.Out's in a reader of its own). An empty body (ReverseProxy made it nil)
// needs none; any other is left as it is: reusable then keeps the request on
// a new connection.
func setGetBody(pr *httputil.ProxyRequest) {
	buffered, ok := pr.In.Body.(interface {
		io.ReaderAt
		Size() int64
	})
	if pr.Out.Body == nil || !ok {
		return
	}
	size := buffered.Size()
	pr.Out.GetBody = func() (io.ReadCloser, error) {
		return io.NopCloser(io.NewSectionReader(buffered, 0, size)), nil
	}
	pr.Out.Body, _ = pr.Out.GetBody()
}

// errUpstreamClosed fails the first write of a request on a reused
// connection the upstream has closed: nothing is written.
var errUpstreamClosed = errors.New("the upstream closed the idle connection")

// upstreamConn is a connection to the upstream that counts the bytes written
// on it and, once asked (checkNextWrite), looks before the next write
// whether the upstream closed it.
type upstreamConn struct {
	net.Conn
	written atomic.Int64
	check   atomic.Bool
}

func (c *upstreamConn) Write(p []byte) (int, error) {
	if c.check.Swap(false) && peerGone(c.Conn) {
		return 0, errUpstreamClosed
	}
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

// attempt follows the connection a forward got last (net/http calls gotConn
// for each attempt that has one).
type attempt struct {
	mu    sync.Mutex
	got   bool          // an attempt had a connection
	conn  *upstreamConn // the last one (nil if it is not one of ours)
	start int64         // conn.written then
}

func (a *attempt) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{GotConn: a.gotConn}
}

// gotConn notes the connection; on a reused one, the request's first write
// looks whether the upstream closed it.
func (a *attempt) gotConn(info httptrace.GotConnInfo) {
	c := info.Conn
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	uc, _ := c.(*upstreamConn)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got, a.conn = true, uc
	if uc == nil {
		return
	}
	a.start = uc.written.Load()
	if info.Reused {
		uc.check.Store(true)
	}
}

// wrote reports whether a byte of the request may have been written: on the
// connection got last, since it was got (a connection that is not ours is
// assumed written on). An earlier connection wrote nothing: the request was
// sent again after it (case 1).
func (a *attempt) wrote() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.got && (a.conn == nil || a.conn.written.Load() > a.start)
}
