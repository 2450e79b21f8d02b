package memstore

import (
	"bytes"

	"github.com/idemkit/idem/server"
)

// cloneResponse copies r so that neither side aliases the other's header or
// body: the copy the single-lock baseline of the benchmarks makes.
func cloneResponse(r *server.Response) *server.Response {
	return &server.Response{Status: r.Status, Header: r.Header.Clone(), Body: bytes.Clone(r.Body)}
}
