package redisstore

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/idemkit/idem/server"
)

// Values stored under a key are binary: a version byte, a kind byte, then
// length-prefixed fields (uvarint lengths). Version 1 is the only one this build
// reads or writes; any other leading byte is rejected with ErrUnknownVersion.
//
//	claim:   0x01 'l' token(16 bytes) deadline(13 digits) suspect(13 digits) fingerprint
//	         (0x01 'c' token(16 bytes) fingerprint: a claim written by an earlier
//	         release, whose lease is the key's PTTL; still read, never written)
//	marked:  0x01 'e' and the rest as a claim's: a claim whose owner began its
//	         effect (server.BeginEffect, markScript)
//	unknown: 0x01 'u' and the rest as a claim's: a marked claim whose owner was
//	         found gone (claimScript); the key's outcome is unknown
//	record:  0x01 'r' fingerprint status header-count {name value-count {value}} body
//
// where fingerprint, name, value and body are each a uvarint length followed by
// that many bytes, and status and the counts are uvarints. A claim's deadline
// (when its lease ends) and suspect (when a claimant first found the lease
// ended, 0 if none) are Redis server times (TIME) in Unix milliseconds, as
// 13 ASCII digits at fixed offsets, so the Lua scripts can read and rewrite
// them; the first 18 bytes (version, kind, token) identify the owner.
const (
	encodingVersion byte = 1
	kindClaim       byte = 'l'
	kindClaimV0     byte = 'c'
	kindMarked      byte = 'e'
	kindUnknown     byte = 'u'
	timeDigits           = 13
	ownerLen             = 2 + tokenLen // version, kind, token: what the scripts compare
	kindRecord      byte = 'r'
	tokenLen             = 16
)

// entry is a decoded value: a claim (in progress, marked or not), an
// outcome-unknown value or a finished record.
type entry struct {
	claim       bool
	unknown     bool // kindUnknown: a marked claim whose owner is gone
	kind        byte
	token       [tokenLen]byte // claims only
	deadline    string         // leased claims (and unknown) only: timeDigits digits
	suspect     string         // leased claims (and unknown) only: timeDigits digits
	fingerprint string
	resp        *server.Response // records only
}

// encodeClaim returns the value of a new in-progress claim, with deadline and
// suspect zero: the claim script writes it with its deadline filled in. Its
// first ownerLen bytes are the owner's compare-and-set operand: the random
// token makes them unique to one owner.
func encodeClaim(token [tokenLen]byte, fingerprint string) []byte {
	zero := strings.Repeat("0", timeDigits)
	return encodeLeasedClaim(token, zero, zero, fingerprint)
}

func encodeLeasedClaim(token [tokenLen]byte, deadline, suspect, fingerprint string) []byte {
	b := make([]byte, 0, ownerLen+2*timeDigits+binary.MaxVarintLen64+len(fingerprint))
	b = append(b, encodingVersion, kindClaim)
	b = append(b, token[:]...)
	b = append(b, deadline...)
	b = append(b, suspect...)
	return appendString(b, fingerprint)
}

// encodeClaimV0 returns a claim as releases before leased claims wrote it.
func encodeClaimV0(token [tokenLen]byte, fingerprint string) []byte {
	b := make([]byte, 0, ownerLen+binary.MaxVarintLen64+len(fingerprint))
	b = append(b, encodingVersion, kindClaimV0)
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
	e := entry{kind: v[1]}
	switch v[1] {
	case kindClaim, kindClaimV0, kindMarked, kindUnknown:
		if len(d.buf) < tokenLen {
			return entry{}, fmt.Errorf("%w: claim token truncated", ErrCorruptRecord)
		}
		e.claim, e.unknown = v[1] != kindUnknown, v[1] == kindUnknown
		copy(e.token[:], d.buf)
		d.buf = d.buf[tokenLen:]
		if v[1] != kindClaimV0 {
			e.deadline, e.suspect = d.digits(), d.digits()
		}
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

// digits reads a fixed-width time: timeDigits ASCII digits.
func (d *decoder) digits() string {
	if d.err != nil {
		return ""
	}
	if len(d.buf) < timeDigits {
		d.err = fmt.Errorf("claim time truncated")
		return ""
	}
	t := d.buf[:timeDigits]
	for _, c := range t {
		if c < '0' || c > '9' {
			d.err = fmt.Errorf("claim time %q is not digits", t)
			return ""
		}
	}
	d.buf = d.buf[timeDigits:]
	return string(t)
}

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
