package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// errBodyTooLarge reports a request body over the configured limit.
var errBodyTooLarge = errors.New("idem/server: request body too large")

// preallocLimit bounds what readBody allocates up front on the word of a
// declared Content-Length; a longer body grows the buffer as it arrives, so
// memory follows the bytes received, not the bytes declared (a client that
// declares 1 MiB and sends nothing costs 16 KiB, not 1 MiB).
const preallocLimit = 16 << 10

// readBody reads the whole request body, at most max bytes. A declared
// Content-Length over max fails before anything is read.
func readBody(r *http.Request, max int64) ([]byte, error) {
	if r.ContentLength > max {
		return nil, errBodyTooLarge
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	var buf []byte
	if r.ContentLength >= 0 {
		buf = make([]byte, 0, min(r.ContentLength, preallocLimit)+1) // +1: room to see EOF without growing
	} else {
		buf = make([]byte, 0, min(max+1, 512))
	}
	lr := io.LimitedReader{R: r.Body, N: max + 1}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > max {
			return nil, errBodyTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) { // a limit in front of the middleware
				return nil, fmt.Errorf("%w: %w", errBodyTooLarge, tooBig)
			}
			return nil, err
		}
	}
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
