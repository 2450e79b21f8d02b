package adaptertest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemkit/idem/server"
)

// Raw is an answer as it was sent: no transparent decompression.
type Raw struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r Raw) replayed() bool { return r.Header.Get(server.HeaderReplayed) == "true" }

func (r Raw) String() string {
	return fmt.Sprintf("%d replayed=%v Content-Encoding=%q Vary=%q ETag=%q, %d bytes", r.Status, r.replayed(),
		r.Header.Values("Content-Encoding"), r.Header.Values("Vary"), r.Header.Values("Etag"), len(r.Body))
}

// rawClient sends what the test says, and decompresses nothing.
var rawClient = &http.Client{Transport: &http.Transport{DisableCompression: true, DisableKeepAlives: true}, Timeout: waitLimit}

// Send sends POST path to srv with key as its Idempotency-Key, body (its
// length declared, or chunked when chunked is true) and Accept-Encoding
// lines acceptEncoding (none when nil), and returns the answer as sent.
func Send(t *testing.T, srv *httptest.Server, path, key string, body []byte, chunked bool, acceptEncoding []string) Raw {
	t.Helper()
	var rd io.Reader = bytes.NewReader(body)
	if chunked {
		rd = io.MultiReader(rd) // hides the length
	}
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if chunked {
		req.ContentLength = -1
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(server.HeaderKey, key)
	if acceptEncoding != nil {
		req.Header["Accept-Encoding"] = acceptEncoding
	}
	resp, err := rawClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Raw{resp.StatusCode, resp.Header, b}
}
