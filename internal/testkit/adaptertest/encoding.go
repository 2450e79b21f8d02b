package adaptertest

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Document is the body (JSON, 201) that the handlers of the representation
// scenarios answer with: about 4 KiB, so that every compression middleware
// compresses it (gzhttp's default minimum is 1 KiB).
var Document = []byte(`{"id":"pay_1","lines":["` + strings.Repeat("a line of the receipt ", 180) + `"]}` + "\n")

// DocumentETag is the strong ETag those handlers set.
const DocumentETag = `"receipt-v1"`

// Accepting and NotAccepting are Accept-Encoding field lines that accept
// gzip, and lines that do not (nil: no Accept-Encoding at all).
var (
	Accepting = [][]string{
		{"gzip"}, {"GZIP"}, {"x-gzip"}, {"gzip, deflate, br, zstd"}, {"*"}, {"br;q=1.0, gzip;q=0.5"},
		{"identity;q=0, gzip"}, {"br", "gzip"}, {"gzip ; q=1", ""},
	}
	NotAccepting = [][]string{
		nil, {""}, {"identity"}, {"br"}, {"br, zstd"}, {"deflate"}, {"gzip;q=0"}, {"*;q=0"}, {"gzip;q=0.000"},
		{"identity;q=0"}, {"gzip;q=0.5, identity"}, {"*, gzip;q=0"}, {"gzip;q=2"}, {"gzip;level=9"}, {"gzip;q=0.0001"},
	}
)

// CheckCompressedReplays is the scenario of a compression middleware (gzip)
// inside the adapter (between it and the handler) at path on srv, whose
// handler answers 201 with Document, DocumentETag and a JSON Content-Type.
// A first request that accepts gzip gets gzip, recorded as sent; then each
// retry gets the same status and the same decoded bytes, replayed: in gzip
// (the recorded bytes, with their Vary and the first answer's ETag) when its
// Accept-Encoding accepts gzip, and decoded, never in gzip, when it does
// not, with Vary naming Accept-Encoding and no strong ETag (a strong one
// named other bytes).
func CheckCompressedReplays(t *testing.T, srv *httptest.Server, path string) {
	t.Helper()
	key := "k-" + randomHex(6)
	first := Send(t, srv, path, key, []byte(`{"amount":5}`), false, []string{"gzip"})
	if first.Status != http.StatusCreated || first.replayed() || first.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("first request: %v, want 201 in gzip, not replayed", first)
	}
	if got := gunzip(t, first.Body); !bytes.Equal(got, Document) {
		t.Fatalf("first request: decoded body %.60q..., want the Document", got)
	}
	for _, ae := range Accepting {
		r := Send(t, srv, path, key, []byte(`{"amount":5}`), false, ae)
		what := fmt.Sprintf("retry with Accept-Encoding %q", ae)
		wantSameAnswer(t, r, first, what)
		if r.Header.Get("Content-Encoding") != "gzip" || !bytes.Equal(r.Body, first.Body) {
			t.Errorf("%s: %v, want the recorded gzip bytes with Content-Encoding: gzip", what, r)
		}
		if got, want := r.Header.Values("Etag"), first.Header.Values("Etag"); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: ETag %q, want the first answer's %q", what, got, want)
		}
	}
	for _, ae := range NotAccepting {
		r := Send(t, srv, path, key, []byte(`{"amount":5}`), false, ae)
		what := fmt.Sprintf("retry with Accept-Encoding %q", ae)
		wantSameAnswer(t, r, first, what)
		if ce := r.Header.Values("Content-Encoding"); len(ce) != 0 || !bytes.Equal(r.Body, Document) {
			t.Errorf("%s: %v (body %.40q...), want the decoded Document with no Content-Encoding", what, r, r.Body)
		}
		for _, etag := range r.Header.Values("Etag") {
			if !strings.HasPrefix(etag, "W/") {
				t.Errorf("%s: strong ETag %q on the decoded answer (it named other bytes)", what, etag)
			}
		}
		if cl := r.Header.Get("Content-Length"); cl != "" && cl != fmt.Sprint(len(r.Body)) {
			t.Errorf("%s: Content-Length %s for %d bytes", what, cl, len(r.Body))
		}
	}
}

// wantSameAnswer checks what every replay of first keeps: the status, the
// marker, the Content-Type, and a Vary that names Accept-Encoding.
func wantSameAnswer(t *testing.T, r, first Raw, what string) {
	t.Helper()
	if r.Status != first.Status || !r.replayed() {
		t.Errorf("%s: %v, want %d replayed", what, r, first.Status)
	}
	if r.Header.Get("Content-Type") != first.Header.Get("Content-Type") {
		t.Errorf("%s: Content-Type %q, want %q", what, r.Header.Get("Content-Type"), first.Header.Get("Content-Type"))
	}
	if !strings.Contains(strings.ToLower(strings.Join(r.Header.Values("Vary"), ",")), "accept-encoding") {
		t.Errorf("%s: Vary %q does not name Accept-Encoding", what, r.Header.Values("Vary"))
	}
}

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not gzip: %v", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("bad gzip: %v", err)
	}
	return out
}

// CheckCompressedInFront is the scenario of a compression middleware (gzip)
// in front of the adapter at path on srv, whose handler answers 201 with
// Document: the record is the identity form, and the compression middleware
// encodes each answer for its own request. A first request and a retry that
// accept gzip get it in gzip (the retry replayed); a retry without
// Accept-Encoding gets the Document as it is, replayed.
func CheckCompressedInFront(t *testing.T, srv *httptest.Server, path string) {
	t.Helper()
	key := "k-" + randomHex(6)
	for i, ae := range [][]string{{"gzip"}, {"gzip"}, nil} {
		r := Send(t, srv, path, key, []byte(`{"amount":5}`), false, ae)
		if r.Status != http.StatusCreated || r.replayed() != (i > 0) {
			t.Fatalf("request %d (Accept-Encoding %q): %v, want 201, replayed %v", i+1, ae, r, i > 0)
		}
		body := r.Body
		if ae != nil {
			if r.Header.Get("Content-Encoding") != "gzip" {
				t.Fatalf("request %d (Accept-Encoding %q): %v, want gzip", i+1, ae, r)
			}
			body = gunzip(t, body)
		} else if ce := r.Header.Values("Content-Encoding"); len(ce) != 0 {
			t.Fatalf("request %d without Accept-Encoding: %v, want no coding", i+1, r)
		}
		if !bytes.Equal(body, Document) {
			t.Errorf("request %d (Accept-Encoding %q): body %.60q..., want the Document", i+1, ae, body)
		}
	}
}
