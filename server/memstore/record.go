package memstore

import (
	"encoding/binary"
	"net/http"
	"strings"

	"github.com/idemkit/idem/server"
)

// A record is the immutable copy of a response that a finished entry holds,
// packed into one string: the header fields (see appendField), then the body.
// It shares nothing with the caller, costs one allocation that the garbage
// collector need not scan, and replays slice names and values out of it
// without copying them (strings are immutable). Once written, it is only read,
// so a replay copies it outside the shard lock.
type record struct {
	status int
	data   string
	body   int   // offset of the body in data
	fields int32 // header fields; -1 for a nil header
	values int32 // header values, all fields together
	// nilBody tells a nil body from an empty one.
	nilBody bool
}

// set makes r a copy of resp.
func (r *record) set(resp *server.Response) {
	var stack [512]byte
	hdr, fields, values := stack[:0], -1, 0 // counted from what is encoded
	if resp.Header != nil {
		fields = 0
		for k, vs := range resp.Header {
			hdr = appendField(hdr, k, vs)
			fields++
			values += len(vs)
		}
	}
	var b strings.Builder // its String does not copy: one allocation in all
	b.Grow(len(hdr) + len(resp.Body))
	b.Write(hdr)
	b.Write(resp.Body)
	*r = record{status: resp.Status, data: b.String(), body: len(hdr),
		fields: int32(fields), values: int32(values), nilBody: resp.Body == nil}
}

// appendField encodes one header field: the name, the number of values plus
// one (0 for a nil slice, which an http.Header may hold), then each value;
// lengths and counts are uvarints.
func appendField(b []byte, name string, values []string) []byte {
	b = appendString(b, name)
	if values == nil {
		return binary.AppendUvarint(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(values))+1)
	for _, v := range values {
		b = appendString(b, v)
	}
	return b
}

// response returns a new copy of the recorded response.
func (r *record) response() *server.Response {
	resp := &server.Response{Status: r.status, Header: r.header()}
	if !r.nilBody {
		resp.Body = make([]byte, len(r.data)-r.body)
		copy(resp.Body, r.data[r.body:])
	}
	return resp
}

// header returns a new copy of the recorded header.
func (r *record) header() http.Header {
	if r.fields < 0 {
		return nil
	}
	h := make(http.Header, r.fields)
	vals := make([]string, r.values) // one backing array, as http.Header.Clone does
	for d := r.data[:r.body]; d != ""; {
		var name string
		var n uint64
		name, d = readString(d)
		if n, d = readUvarint(d); n == 0 {
			h[name] = nil
			continue
		}
		vs := vals[: n-1 : n-1]
		vals = vals[n-1:]
		for i := range vs {
			vs[i], d = readString(d)
		}
		h[name] = vs
	}
	return h
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// readUvarint decodes a uvarint that appendUvarint wrote at the start of s.
func readUvarint(s string) (uint64, string) {
	var x uint64
	for i, shift := 0, uint(0); ; i, shift = i+1, shift+7 {
		c := s[i]
		x |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return x, s[i+1:]
		}
	}
}

// readString decodes a string that appendString wrote at the start of s.
func readString(s string) (string, string) {
	n, s := readUvarint(s)
	return s[:n], s[n:]
}
