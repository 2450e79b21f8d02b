package idem

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newHTTP2Server starts an httptest TLS server with HTTP/2 on, whose handler
// aborts the first attempt (panic(http.ErrAbortHandler): an RST_STREAM
// INTERNAL_ERROR over HTTP/2) and answers 200 after that. It returns the
// server and the number of requests it saw.
func newHTTP2Server(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if n.Add(1) == 1 {
			panic(http.ErrAbortHandler)
		}
		_, _ = io.WriteString(w, "ok")
	}))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = nil
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, &n
}

// TestHTTP2AbortRetried: over HTTP/2 a handler that aborts surfaces as a
// stream error (INTERNAL_ERROR), which idem used to treat as permanent. It is
// retried for a GET and a keyed POST; an unkeyed POST is not, and the error
// says the request, not the error, was not retryable.
func TestHTTP2AbortRetried(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, method string
		opts         []Option
		wantAttempts int32
	}{
		{"GET", http.MethodGet, nil, 2},
		{"POST/auto-key", http.MethodPost, nil, 2},
		{"POST/no-key", http.MethodPost, []Option{WithAutoKeys(false)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, n := newHTTP2Server(t)
			tr := NewTransport(srv.Client().Transport, append([]Option{noWait()}, tc.opts...)...)
			resp, err := tr.RoundTrip(mustRequest(t, context.Background(), tc.method, srv.URL, "{}"))
			assert.Equal(t, tc.wantAttempts, n.Load(), "requests the server saw")
			if tc.wantAttempts == 1 {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "request not retryable")
				var se h2StreamError
				require.True(t, errors.As(err, &se), "net/http's stream error converts into h2StreamError: %v", err)
				assert.Equal(t, uint32(0x2), se.Code, "INTERNAL_ERROR")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, 2, resp.ProtoMajor)
			assert.Equal(t, "ok", readAll(t, resp))
		})
	}
}

// h2StreamError has the fields of net/http's HTTP/2 stream error: net/http's
// error converts itself into any struct with these fields through its As
// method, so the test reads the code without naming an unexported type.
type h2StreamError struct {
	StreamID uint32
	Code     uint32
	Cause    error
}

func (e h2StreamError) Error() string { return "http2 stream error" }

// rawH2 is an HTTP/2 server over cleartext (prior knowledge) written frame by
// frame, for the faults net/http's server never makes on demand: GOAWAY with
// a chosen last stream id, RST_STREAM in the middle of a header block. For
// each request (HEADERS frame) it calls fault with the connection's number (1
// for the first) and the stream id; fault writes what it wants and reports
// whether to keep the connection.
type rawH2 struct {
	ln    net.Listener
	conns atomic.Int32
	wg    sync.WaitGroup
	mu    sync.Mutex
	open  []net.Conn
}

// HTTP/2 frame types, flags and error codes (RFC 9113).
const (
	h2Data, h2Headers, h2RSTStream, h2Settings, h2GoAway = 0x0, 0x1, 0x3, 0x4, 0x7
	h2EndStream, h2EndHeaders, h2Ack                     = 0x1, 0x4, 0x1
	h2NoError, h2InternalError                           = 0x0, 0x2
	h2Status200                                          = 0x88 // HPACK: indexed :status 200
)

func startRawH2(t *testing.T, fault func(conn int, c net.Conn, stream uint32) (keep bool)) *rawH2 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &rawH2{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(s.conns.Add(1))
			s.mu.Lock()
			s.open = append(s.open, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				s.serve(n, c, fault)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.open {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *rawH2) serve(n int, c net.Conn, fault func(int, net.Conn, uint32) bool) {
	preface := make([]byte, 24)
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	writeFrame(c, h2Settings, 0, 0, nil)
	hdr := make([]byte, 9)
	for {
		if _, err := io.ReadFull(c, hdr); err != nil {
			return
		}
		length := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		typ, flags, stream := hdr[3], hdr[4], binary.BigEndian.Uint32(hdr[5:])&0x7fffffff
		if _, err := io.CopyN(io.Discard, c, int64(length)); err != nil {
			return
		}
		switch {
		case typ == h2Settings && flags&h2Ack == 0:
			writeFrame(c, h2Settings, h2Ack, 0, nil)
		case typ == h2Headers:
			if !fault(n, c, stream) {
				return
			}
		}
	}
}

func writeFrame(w io.Writer, typ, flags byte, stream uint32, payload []byte) {
	b := make([]byte, 9+len(payload))
	b[0], b[1], b[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	b[3], b[4] = typ, flags
	binary.BigEndian.PutUint32(b[5:], stream)
	copy(b[9:], payload)
	_, _ = w.Write(b)
}

// answer200 sends a complete 200 response with no body on stream.
func answer200(c net.Conn, stream uint32) {
	writeFrame(c, h2Headers, h2EndStream|h2EndHeaders, stream, []byte{h2Status200})
}

func u32s(vs ...uint32) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.BigEndian.PutUint32(b[4*i:], v)
	}
	return b
}

// h2cTransport is an http.Transport that speaks HTTP/2 over cleartext only.
func h2cTransport(t *testing.T) *http.Transport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// TestHTTP2ConnectionFaults: faults only a raw HTTP/2 server makes on demand,
// each retried for a GET and a keyed POST (the second connection answers).
func TestHTTP2ConnectionFaults(t *testing.T) {
	t.Parallel()
	faults := []struct {
		name  string
		fault func(c net.Conn, stream uint32)
	}{
		// GOAWAY whose last stream id (0) excludes the request, then a close.
		{"GOAWAY excluding the stream", func(c net.Conn, stream uint32) {
			writeFrame(c, h2GoAway, 0, 0, u32s(0, h2NoError))
		}},
		// A header block cut by RST_STREAM before its END_HEADERS.
		{"RST_STREAM after partial headers", func(c net.Conn, stream uint32) {
			writeFrame(c, h2Headers, 0, stream, []byte{h2Status200})
			writeFrame(c, h2RSTStream, 0, stream, u32s(h2InternalError))
		}},
		// GOAWAY with an error that includes the stream: it may have been
		// processed, so only a repeatable request is retried.
		{"GOAWAY INTERNAL_ERROR including the stream", func(c net.Conn, stream uint32) {
			writeFrame(c, h2GoAway, 0, 0, u32s(stream, h2InternalError))
		}},
	}
	for _, f := range faults {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			t.Run(f.name+"/"+method, func(t *testing.T) {
				t.Parallel()
				srv := startRawH2(t, func(conn int, c net.Conn, stream uint32) bool {
					if conn == 1 {
						f.fault(c, stream)
						return false // close the connection
					}
					answer200(c, stream)
					return true
				})
				tr := NewTransport(h2cTransport(t), noWait())
				resp, err := tr.RoundTrip(mustRequest(t, context.Background(), method, "http://"+srv.ln.Addr().String()+"/", "{}"))
				require.NoError(t, err)
				assert.Equal(t, http.StatusOK, resp.StatusCode)
				assert.Equal(t, 2, resp.ProtoMajor)
				_ = resp.Body.Close()
				assert.GreaterOrEqual(t, srv.conns.Load(), int32(2), "the retry used a new connection")
			})
		}
	}
}
