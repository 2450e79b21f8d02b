package redisstore

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"slices"

	"github.com/idemkit/idem/server"
)

// Values stored under a key are binary: a version byte, a kind byte, then
// length-prefixed fields (uvarint lengths). Version 1 is the only one this build
// reads or writes; any other leading byte is rejected with ErrUnknownVersion.
//
//	claim:  0x01 'c' token(16 bytes) fingerprint
//	record: 0x01 'r' fingerprint status header-count {name value-count {value}} body
//
// where fingerprint, name, value and body are each a uvarint length followed by
// that many bytes, and status and the counts are uvarints.
const (
	encodingVersion byte = 1
	kindClaim       byte = 'c'
	kindRecord      byte = 'r'
	tokenLen             = 16
)

// entry is a decoded value: a claim (in progress) or a finished record.
type entry struct {
	claim       bool
	token       [tokenLen]byte // claims only
	fingerprint string
	resp        *server.Response // records only
}

// encodeClaim returns the value of an in-progress claim. It doubles as the
// owner's compare-and-set operand: the scripts compare the whole stored value
// with it, so the random token makes it unique to one owner.
func encodeClaim(token [tokenLen]byte, fingerprint string) []byte {
	b := make([]byte, 0, 2+tokenLen+binary.MaxVarintLen64+len(fingerprint))
	b = append(b, encodingVersion, kindClaim)
	b = append(b, token[:]...)
	return appendString(b, fingerprint)
}

// encodeRecord returns the value of a finished record. Header names are written
// in sorted order (so equal responses encode equally) and each name's values in
// their original order.
func encodeRecord(fingerprint string, resp *server.Response) []byte {
	size := 2 + 2*binary.MaxVarintLen64 + len(fingerprint) + binary.MaxVarintLen64 + len(resp.Body) + binary.MaxVarintLen64
	names := make([]string, 0, len(resp.Header))
	for name, values := range resp.Header {
		names = append(names, name)
		size += 2*binary.MaxVarintLen64 + len(name)
		for _, v := range values {
			size += binary.MaxVarintLen64 + len(v)
		}
	}
	slices.Sort(names)
	b := make([]byte, 0, size)
	b = append(b, encodingVersion, kindRecord)
	b = appendString(b, fingerprint)
	b = binary.AppendUvarint(b, uint64(resp.Status))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = appendString(b, name)
		values := resp.Header[name]
		b = binary.AppendUvarint(b, uint64(len(values)))
		for _, v := range values {
			b = appendString(b, v)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(resp.Body)))
	return append(b, resp.Body...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeEntry parses a stored value. Anything it cannot read completely and
// exactly (a truncated field, trailing bytes, an unknown kind) is an error
// wrapping ErrCorruptRecord; an unknown version byte wraps ErrUnknownVersion.
func decodeEntry(v []byte) (entry, error) {
	if len(v) < 2 {
		return entry{}, fmt.Errorf("%w: %d bytes", ErrCorruptRecord, len(v))
	}
	if v[0] != encodingVersion {
		return entry{}, fmt.Errorf("%w: version %d (this build reads version %d)", ErrUnknownVersion, v[0], encodingVersion)
	}
	d := decoder{buf: v[2:]}
	var e entry
	switch v[1] {
	case kindClaim:
		if len(d.buf) < tokenLen {
			return entry{}, fmt.Errorf("%w: claim token truncated", ErrCorruptRecord)
		}
		e.claim = true
		copy(e.token[:], d.buf)
		d.buf = d.buf[tokenLen:]
		e.fingerprint = d.string()
	case kindRecord:
		e.fingerprint = d.string()
		e.resp = d.response()
	default:
		return entry{}, fmt.Errorf("%w: unknown kind %#x", ErrCorruptRecord, v[1])
	}
	if d.err == nil && len(d.buf) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.buf))
	}
	if d.err != nil {
		return entry{}, fmt.Errorf("%w: %w", ErrCorruptRecord, d.err)
	}
	return e, nil
}

// decoder reads length-prefixed fields; after the first error every read
// returns a zero value and err keeps that first error.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) uvarint(what string, limit uint64) uint64 {
	if d.err != nil {
		return 0
	}
	n, size := binary.Uvarint(d.buf)
	if size <= 0 || (size > 1 && d.buf[size-1] == 0) { // truncated, too long, or not minimal
		d.err = fmt.Errorf("bad %s", what)
		return 0
	}
	if n > limit {
		d.err = fmt.Errorf("%s %d out of range", what, n)
		return 0
	}
	d.buf = d.buf[size:]
	return n
}

func (d *decoder) bytes() []byte {
	n := d.uvarint("length", uint64(len(d.buf)))
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.buf)) {
		d.err = fmt.Errorf("length %d past the end", n)
		return nil
	}
	out := d.buf[:n:n]
	d.buf = d.buf[n:]
	return out
}

func (d *decoder) string() string { return string(d.bytes()) }

func (d *decoder) response() *server.Response {
	status := d.uvarint("status", math.MaxInt32)
	// Every header name and value takes at least one byte, so the counts are
	// bounded by what is left; this keeps a corrupt count from allocating much.
	// Names must be strictly increasing, as encodeRecord writes them.
	names := d.uvarint("header count", uint64(len(d.buf)))
	h := make(http.Header, names)
	prev := ""
	for i := range names {
		name := d.string()
		count := d.uvarint("value count", uint64(len(d.buf)))
		if d.err != nil {
			return nil
		}
		if i > 0 && name <= prev {
			d.err = fmt.Errorf("header %q out of order", name)
			return nil
		}
		prev = name
		values := make([]string, count)
		for i := range values {
			values[i] = d.string()
		}
		h[name] = values
	}
	body := d.bytes()
	if d.err != nil {
		return nil
	}
	return &server.Response{Status: int(status), Header: h, Body: body}
}
