package adaptertest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/server"
)

// Answer is what Post got back: comparable, so a test can want one whole.
type Answer struct {
	Status   int
	Body     string
	Replayed bool // Idempotent-Replayed: true
}

// Post sends POST path to srv with the body {} and key as its
// Idempotency-Key (none when key is ""), and reads the answer. The adapters'
// own tests (ginidem, echoidem) use it beside Run.
func Post(t *testing.T, srv *httptest.Server, path, key string) Answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(server.HeaderKey, key)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Answer{resp.StatusCode, string(b), resp.Header.Get(server.HeaderReplayed) == "true"}
}
