package server

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/idemkit/idem/internal/httpfield"
)

// A recorded response is one representation, negotiated with the request
// that ran the handler: its body is in the content coding (RFC 9110 section
// 8.4) that request accepted, gzip from a compression middleware between the
// adapter and the handler, say. This file keeps that form replayable to a
// retry that accepts another: the handler is only offered codings the
// middleware can undo; the representation headers (Content-Encoding, and the
// Vary that goes with it) are recorded with the body whatever the
// allow-list; a response the middleware could not decode is not recorded;
// and a replay goes in the recorded coding only to a retry whose
// Accept-Encoding accepts it, decoded to identity for any other (identity is
// always acceptable, RFC 9110 section 12.5.3).

// ErrUndecodable is the error behind the answer to a protected response
// whose body is in a content coding the middleware cannot decode (only gzip
// and deflate can be), or is not valid in its coding: such a response could
// not be replayed to a retry that does not accept its coding, so it is not
// recorded, nor sent (500, ProblemUnprotectable; the key is released, or
// records ProblemOutcomeUnknown after DeclareEffect). The same error is behind
// a 406 (ProblemNotAcceptable) for such a record written by an older version.
var ErrUndecodable = errors.New("idem/server: response body in a content coding the middleware cannot decode")

// Header names of the representation.
const (
	hdrAcceptEncoding  = "Accept-Encoding"
	hdrContentEncoding = "Content-Encoding"
	hdrVary            = "Vary"
	hdrETag            = "Etag" // canonical form of ETag
)

// describesEncodedBytes lists the headers a decoded replay leaves out: they
// describe the encoded body (its coding, its digests), not the decoded one.
// The digests are sent only when allow-listed (WithStoredHeaders).
var describesEncodedBytes = []string{hdrContentEncoding, "Content-Digest", "Repr-Digest", "Digest", "Content-Md5"}

// decodable reports whether coding (lower case, x-gzip as gzip) is one the
// middleware can decode.
func decodable(coding string) bool {
	return coding == "gzip" || coding == "deflate" || coding == "identity"
}

// fieldList walks the elements of a comma-separated list field (RFC 9110
// section 5.6.1) across its field lines, skipping empty elements. Neither
// Accept-Encoding nor Content-Encoding has quoted strings, so a comma always
// ends an element.
type fieldList struct {
	lines []string
	rest  string
}

// next returns the next element, without its surrounding whitespace.
func (l *fieldList) next() (string, bool) {
	for {
		if l.rest == "" {
			if len(l.lines) == 0 {
				return "", false
			}
			l.rest, l.lines = l.lines[0], l.lines[1:]
			continue
		}
		var e string
		e, l.rest, _ = strings.Cut(l.rest, ",")
		if e = httpfield.TrimOWS(e); e != "" {
			return e, true
		}
	}
}

// codingName is a content coding as this file compares them: lower case
// (codings are case-insensitive), x-gzip as gzip (RFC 9110 section 8.4.1.3).
func codingName(s string) string {
	s = strings.ToLower(s)
	if s == "x-gzip" {
		return "gzip"
	}
	return s
}

// accepts reports whether a request with the Accept-Encoding field lines ae
// accepts a response in coding (a codingName, not identity), by RFC 9110
// section 12.5.3, and prefers it to identity. It is strict, because identity
// is always a safe answer: the coding must be listed, by name (x-gzip counts
// for gzip) or by "*", with a qvalue above 0 and at least the one identity
// gets (its own, or "*"'s; identity not listed does not compete). No
// Accept-Encoding at all does not accept it (the client did not say it can
// decode anything), nor does a field with an element this parser does not
// take (a qvalue out of range or with four decimals, a parameter other than
// q, a name that is not a token). A coding listed twice gets the lower weight.
func accepts(ae []string, coding string) bool {
	q, qIdentity, qAny := -1, -1, -1 // thousandths; -1: not listed
	for _, line := range ae {
		// One pass over the bytes (it runs on every replay of a coded
		// record): element = token OWS [";" OWS "q=" qvalue OWS], then "," or
		// the end; OWS and commas between elements are skipped.
		for i := 0; ; {
			for i < len(line) && (line[i] == ',' || isOWS(line[i])) {
				i++
			}
			if i == len(line) {
				break
			}
			j := i
			for j < len(line) && tchar[line[j]] {
				j++
			}
			name, w := line[i:j], 1000
			if name == "" {
				return false
			}
			j = skipOWS(line, j)
			if j < len(line) && line[j] == ';' {
				j = skipOWS(line, j+1)
				k := j
				for k < len(line) && line[k] != ',' && !isOWS(line[k]) {
					k++
				}
				p := line[j:k]
				if len(p) < 2 || p[0]|0x20 != 'q' || p[1] != '=' {
					return false
				}
				var ok bool
				if w, ok = qvalue(p[2:]); !ok {
					return false
				}
				j = skipOWS(line, k)
			}
			if j < len(line) && line[j] != ',' {
				return false
			}
			i = j
			switch {
			case name == "*":
				qAny = lower(qAny, w)
			case strings.EqualFold(name, "identity"):
				qIdentity = lower(qIdentity, w)
			case len(name) == len(coding) && strings.EqualFold(name, coding),
				coding == "gzip" && len(name) == len("x-gzip") && strings.EqualFold(name, "x-gzip"):
				q = lower(q, w)
			}
		}
	}
	if q < 0 {
		q = qAny
	}
	if qIdentity < 0 {
		qIdentity = qAny
	}
	return q > 0 && q >= qIdentity
}

func isOWS(c byte) bool { return c == ' ' || c == '\t' }

// skipOWS returns the index of the first byte of s at or after i that is
// not optional whitespace.
func skipOWS(s string, i int) int {
	for i < len(s) && isOWS(s[i]) {
		i++
	}
	return i
}

// lower is the lower of two weights, -1 standing for none yet.
func lower(cur, w int) int {
	if cur < 0 {
		return w
	}
	return min(cur, w)
}

// qvalue parses an RFC 9110 qvalue, "0" to "1" with at most three decimals,
// in thousandths.
func qvalue(s string) (int, bool) {
	if s == "" || len(s) > 5 || (s[0] != '0' && s[0] != '1') {
		return 0, false
	}
	n := int(s[0]-'0') * 1000
	if len(s) == 1 {
		return n, true
	}
	if s[1] != '.' {
		return 0, false
	}
	for i, scale := 2, 100; i < len(s); i, scale = i+1, scale/10 {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n += int(s[i]-'0') * scale
	}
	if n > 1000 {
		return 0, false
	}
	return n, true
}

// offerDecodable gives r, the protected handler's own copy of the request,
// an Accept-Encoding that names only the codings the middleware can decode:
// the elements naming another (br, zstd, ...) or "*" are left out, and when
// none is left r asks for identity. So a compression middleware inside the
// adapter, or the upstream behind a gateway, answers in a coding that a
// replay can undo. A request whose field needs no change keeps its header
// map; otherwise r gets a copy, and the caller's request is not touched.
func offerDecodable(r *http.Request) {
	ae := r.Header[hdrAcceptEncoding]
	kept, changed := decodableElements(ae)
	if !changed {
		return
	}
	r.Header = r.Header.Clone()
	if kept == "" {
		kept = "identity"
	}
	r.Header[hdrAcceptEncoding] = []string{kept}
}

// decodableElements returns the elements of the Accept-Encoding lines ae
// whose coding the middleware can decode, joined by ", ", and whether any
// element was left out.
func decodableElements(ae []string) (string, bool) {
	drop := false
	for l := (fieldList{lines: ae}); !drop; {
		e, ok := l.next()
		if !ok {
			break
		}
		drop = !decodable(elementCoding(e))
	}
	if !drop {
		return "", false
	}
	var kept []string
	for l := (fieldList{lines: ae}); ; {
		e, ok := l.next()
		if !ok {
			break
		}
		if decodable(elementCoding(e)) {
			kept = append(kept, e)
		}
	}
	return strings.Join(kept, ", "), true
}

// elementCoding is the coding an Accept-Encoding element names.
func elementCoding(e string) string {
	name, _, _ := strings.Cut(e, ";")
	return codingName(httpfield.TrimOWS(name))
}

// contentCodings returns the codings of the Content-Encoding lines, in the
// order they were applied, as codingNames, identity left out. A coding that
// is not a token is an error.
func contentCodings(lines []string) ([]string, error) {
	var out []string
	for l := (fieldList{lines: lines}); ; {
		e, ok := l.next()
		if !ok {
			return out, nil
		}
		if !isToken(e) {
			return nil, fmt.Errorf("%w: Content-Encoding %q is not a list of codings", ErrUndecodable, strings.Join(lines, ", "))
		}
		if c := codingName(e); c != "identity" {
			out = append(out, c)
		}
	}
}

// decoder returns a reader of body with codings undone, the last applied
// first.
func decoder(codings []string, body []byte) (io.Reader, error) {
	var r io.Reader = bytes.NewReader(body)
	for i := len(codings) - 1; i >= 0; i-- {
		var err error
		switch codings[i] {
		case "gzip":
			var zr *gzip.Reader
			zr, err = gzip.NewReader(r)
			r = zr
		case "deflate": // the zlib format (RFC 9110 section 8.4.1.2)
			r, err = zlib.NewReader(r)
		default:
			return nil, fmt.Errorf("%w: %q (it decodes gzip and deflate)", ErrUndecodable, codings[i])
		}
		if err != nil {
			return nil, fmt.Errorf("%w: the body is not valid %s: %v", ErrUndecodable, codings[i], err)
		}
	}
	return r, nil
}

// decode writes body, with codings undone, to dst: at most max bytes, else
// an error wrapping ErrResponseTooLarge; a body that does not decode is an
// error wrapping ErrUndecodable.
func decode(dst io.Writer, codings []string, body []byte, max int64) error {
	r, err := decoder(codings, body)
	if err != nil {
		return err
	}
	n, err := io.Copy(dst, io.LimitReader(r, max+1))
	switch {
	case err != nil:
		return fmt.Errorf("%w: the body is not valid %s: %v", ErrUndecodable, strings.Join(codings, ", "), err)
	case n > max:
		return fmt.Errorf("%w: decoded, the body is longer than %d bytes", ErrResponseTooLarge, max)
	}
	return nil
}

// checkDecodable returns nil when the response to record, resp, can be
// replayed decoded: it has no content coding, or an empty body, or its
// codings are ones the middleware decodes and its body decodes to at most
// max bytes. Otherwise the error says why (ErrUndecodable, or
// ErrResponseTooLarge: a replay is bounded like the response, decoded).
func checkDecodable(resp *Response, max int64) error {
	ce := resp.Header[hdrContentEncoding]
	if len(ce) == 0 || len(resp.Body) == 0 {
		return nil
	}
	codings, err := contentCodings(ce)
	if err != nil || len(codings) == 0 {
		return err
	}
	return decode(io.Discard, codings, resp.Body, max)
}

// forRetry returns the stored response resp as it is replayed to a request
// with header req: resp itself when it has no content
// coding; resp in its coding, with a Vary that names Accept-Encoding, when the
// request's Accept-Encoding accepts every coding it is in (see accepts); else a copy decoded to
// identity, with the same status and every header but those that describe
// the encoded bytes (Content-Encoding, digests), a Vary that names
// Accept-Encoding, and each strong ETag made weak: a strong ETag names one
// sequence of bytes, and the decoded body is another, equivalent one (as
// nginx does when it compresses). Content-Length is never recorded: net/http
// computes it from what is sent. A body it cannot decode (a coding other than
// gzip and deflate, recorded by an older version) is an error wrapping
// ErrUndecodable.
func forRetry(resp *Response, req http.Header, max int64) (*Response, error) {
	ce := resp.Header[hdrContentEncoding]
	if len(ce) == 0 {
		return resp, nil
	}
	ae := req[hdrAcceptEncoding]
	coded, accepted := false, true
	if len(ce) == 1 && strings.IndexByte(ce[0], ',') < 0 { // one coding, as compression middlewares write
		if c := codingName(httpfield.TrimOWS(ce[0])); c != "identity" {
			coded, accepted = true, accepts(ae, c)
		}
	} else {
		for l := (fieldList{lines: ce}); accepted; {
			e, ok := l.next()
			if !ok {
				break
			}
			if c := codingName(e); c != "identity" {
				coded, accepted = true, accepts(ae, c)
			}
		}
	}
	switch {
	case !coded:
		return resp, nil
	case accepted:
		if variesByEncoding(resp.Header[hdrVary]) {
			return resp, nil
		}
		h := maps.Clone(resp.Header)
		h[hdrVary] = append(slices.Clip(h[hdrVary]), hdrAcceptEncoding)
		return &Response{Status: resp.Status, Header: h, Body: resp.Body}, nil
	}
	body := resp.Body
	if len(body) > 0 {
		codings, err := contentCodings(ce)
		if err != nil {
			return nil, err
		}
		var buf bytes.Buffer
		if err := decode(&buf, codings, body, max); err != nil {
			return nil, err
		}
		body = buf.Bytes()
	}
	h := make(http.Header, len(resp.Header)+1)
	for k, v := range resp.Header {
		switch {
		case slices.Contains(describesEncodedBytes, k):
			continue
		case k == hdrETag:
			v = weakETags(v)
		}
		if len(v) > 0 {
			h[k] = slices.Clip(v)
		}
	}
	if !variesByEncoding(h[hdrVary]) {
		h[hdrVary] = append(h[hdrVary], hdrAcceptEncoding)
	}
	return &Response{Status: resp.Status, Header: h, Body: body}, nil
}

// variesByEncoding reports whether the Vary lines name Accept-Encoding (or
// are "*", everything).
func variesByEncoding(vary []string) bool {
	if slices.Contains(vary, hdrAcceptEncoding) { // what compression middlewares write
		return true
	}
	for l := (fieldList{lines: vary}); ; {
		e, ok := l.next()
		if !ok {
			return false
		}
		if e == "*" || strings.EqualFold(e, hdrAcceptEncoding) {
			return true
		}
	}
}

// weakETags returns the ETag values with each strong one made weak (W/
// before it); a malformed one (not a quoted string) is left out.
func weakETags(vs []string) []string {
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		switch {
		case strings.HasPrefix(v, `W/"`):
			out = append(out, v)
		case strings.HasPrefix(v, `"`):
			out = append(out, "W/"+v)
		}
	}
	return out
}

// representationHeaders adds to dst, the allow-listed headers of a response
// to record, the representation headers of the handler's header map src that
// the allow-list left out: Content-Encoding, under any spelling, and with it
// the Vary that says what chose that coding. It returns dst (made when nil
// and there is something to add).
func representationHeaders(dst, src http.Header) http.Header {
	if len(dst[hdrContentEncoding]) > 0 && len(dst[hdrVary]) > 0 {
		return dst
	}
	var ce, vary []string
	for k, v := range src {
		switch {
		case strings.EqualFold(k, hdrContentEncoding):
			ce = append(ce, v...)
		case strings.EqualFold(k, hdrVary):
			vary = append(vary, v...)
		}
	}
	if len(ce) == 0 {
		return dst
	}
	if dst == nil {
		dst = make(http.Header, 2)
	}
	if len(dst[hdrContentEncoding]) == 0 {
		dst[hdrContentEncoding] = ce
	}
	if len(dst[hdrVary]) == 0 && len(vary) > 0 {
		dst[hdrVary] = vary
	}
	return dst
}
