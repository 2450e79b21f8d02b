package redisstore

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/http"
	"reflect"
	"testing"

	"github.com/idemkit/idem/server"
)

// randomResponse returns a response with arbitrary bytes in the body, header
// names and values (NUL, newlines, invalid UTF-8) and repeated header values.
func randomResponse(rng *rand.Rand) *server.Response {
	randBytes := func(max int) []byte {
		b := make([]byte, rng.IntN(max+1))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	h := http.Header{}
	for range rng.IntN(5) {
		name := string(randBytes(12))
		values := make([]string, rng.IntN(4))
		for i := range values {
			values[i] = string(randBytes(20))
		}
		h[name] = values
	}
	return &server.Response{Status: 100 + rng.IntN(900), Header: h, Body: randBytes(4096)}
}

func sameResponse(a, b *server.Response) bool {
	return a.Status == b.Status && bytes.Equal(a.Body, b.Body) && reflect.DeepEqual(a.Header, b.Header)
}

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		resp *server.Response
	}{
		{"empty", &server.Response{Status: 204, Header: http.Header{}, Body: []byte{}}},
		{"binary body", &server.Response{Status: 200, Header: http.Header{}, Body: []byte("a\x00b\r\n\xff\xfe\n")}},
		{"repeated values", &server.Response{Status: 201, Header: http.Header{
			"Link": {"<a>; rel=x", "<b>; rel=y", "<a>; rel=x"}, "Content-Type": {"application/json"}, "X-Empty": {}},
			Body: []byte("{}")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := decodeEntry(encodeRecord("fp\x00", tt.resp))
			if err != nil {
				t.Fatal(err)
			}
			if e.claim || e.fingerprint != "fp\x00" || !sameResponse(e.resp, tt.resp) {
				t.Fatalf("decoded %+v %+v, want %+v", e, e.resp, tt.resp)
			}
		})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		want := randomResponse(rng)
		e, err := decodeEntry(encodeRecord("fp", want))
		if err != nil || !sameResponse(e.resp, want) {
			t.Fatalf("round trip of %+v: %+v, %v", want, e.resp, err)
		}
	}
}

func TestClaimRoundTrip(t *testing.T) {
	t.Parallel()
	tok := [tokenLen]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 255}
	for _, v := range [][]byte{encodeClaim(tok, "abc"), encodeClaimV0(tok, "abc"),
		encodeLeasedClaim(tok, "1796038357360", "1796038357999", "abc")} {
		e, err := decodeEntry(v)
		if err != nil || !e.claim || e.token != tok || e.fingerprint != "abc" || e.resp != nil {
			t.Fatalf("decoded %q: %+v, %v", v, e, err)
		}
	}
	marked, err := decodeEntry(withKind(encodeClaim(tok, "abc"), kindMarked))
	if err != nil || !marked.claim || marked.unknown || marked.token != tok || marked.fingerprint != "abc" {
		t.Fatalf("decoded a marked claim: %+v, %v", marked, err)
	}
	unknown, err := decodeEntry(withKind(encodeClaim(tok, "abc"), kindUnknown))
	if err != nil || unknown.claim || !unknown.unknown || unknown.fingerprint != "abc" || unknown.resp != nil {
		t.Fatalf("decoded an outcome-unknown value: %+v, %v", unknown, err)
	}
	if _, err := decodeEntry(encodeLeasedClaim(tok, "17960383573x0", "0000000000000", "abc")); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("a claim time with a non-digit: %v, want ErrCorruptRecord", err)
	}
}

func TestDecodeRejectsEveryTruncation(t *testing.T) {
	t.Parallel()
	v := encodeRecord("fingerprint", &server.Response{Status: 200,
		Header: http.Header{"A": {"1", "2"}, "B": {"3"}}, Body: []byte("body")})
	for n := range len(v) {
		if _, err := decodeEntry(v[:n]); !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("decode of the first %d of %d bytes: %v, want ErrCorruptRecord", n, len(v), err)
		}
	}
}

// FuzzDecode: decoding arbitrary bytes never panics, and whatever decodes
// re-encodes to the same bytes (the encoding is canonical).
func FuzzDecode(f *testing.F) {
	f.Add(encodeRecord("fp", &server.Response{Status: 200, Header: http.Header{"A": {"x", "y"}}, Body: []byte("b\x00")}))
	f.Add(encodeClaim([tokenLen]byte{7}, "fp"))
	f.Add(encodeLeasedClaim([tokenLen]byte{7}, "1796038357360", "0000000000000", "fp"))
	f.Add(encodeClaimV0([tokenLen]byte{7}, "fp"))
	f.Add(withKind(encodeClaim([tokenLen]byte{7}, "fp"), kindMarked))
	f.Add(withKind(encodeClaim([tokenLen]byte{7}, "fp"), kindUnknown))
	f.Add([]byte{1, 'r', 0, 200, 1, 0, 0})
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, v []byte) {
		e, err := decodeEntry(v)
		if err != nil {
			if !errors.Is(err, ErrCorruptRecord) && !errors.Is(err, ErrUnknownVersion) {
				t.Fatalf("error %v wraps neither ErrCorruptRecord nor ErrUnknownVersion", err)
			}
			return
		}
		var again []byte
		switch {
		case e.claim && e.kind == kindClaimV0:
			again = encodeClaimV0(e.token, e.fingerprint)
		case e.claim || e.unknown: // leased, marked or unknown
			again = encodeLeasedClaim(e.token, e.deadline, e.suspect, e.fingerprint)
			again[1] = e.kind
		default:
			again = encodeRecord(e.fingerprint, e.resp)
		}
		if !bytes.Equal(again, v) {
			t.Fatalf("re-encoding %q gave %q", v, again)
		}
	})
}

// FuzzRecordRoundTrip: any response encodes and decodes to itself.
func FuzzRecordRoundTrip(f *testing.F) {
	f.Add("fp", 200, "Content-Type", "text/plain", "text/html", []byte("body\n\x00\xff"))
	f.Fuzz(func(t *testing.T, fp string, status int, name, v1, v2 string, body []byte) {
		if status < 0 || status > 1<<31-1 {
			t.Skip()
		}
		want := &server.Response{Status: status, Header: http.Header{name: {v1, v2, v1}}, Body: body}
		e, err := decodeEntry(encodeRecord(fp, want))
		if err != nil {
			t.Fatal(err)
		}
		if e.fingerprint != fp || e.resp.Status != status || !bytes.Equal(e.resp.Body, body) ||
			!reflect.DeepEqual(e.resp.Header, want.Header) {
			t.Fatalf("got %+v, want %+v", e.resp, want)
		}
	})
}
