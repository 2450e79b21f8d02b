package chaos

import (
	"errors"
	"net/http"
)

// errDropped is what writes to a dropped response return.
var errDropped = errors.New("chaos: connection dropped")

// dropWriter cuts the connection at the first attempt to answer, so the client
// sees the connection close (EOF) although the server did all its work.
type dropWriter struct {
	http.ResponseWriter
	dropped bool
}

func (d *dropWriter) WriteHeader(int) { d.drop() }

func (d *dropWriter) Write([]byte) (int, error) {
	d.drop()
	return 0, errDropped
}

// Unwrap lets http.ResponseController reach the connection.
func (d *dropWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

func (d *dropWriter) drop() {
	if d.dropped {
		return
	}
	d.dropped = true
	conn, _, err := http.NewResponseController(d.ResponseWriter).Hijack()
	if err != nil { // HTTP/2 cannot hijack: abort the stream instead
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}
