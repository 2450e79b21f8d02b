package adaptertest

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/server"
)

// CheckOuterBodyLimit is the scenario of a body limit of limit bytes set in
// front of the adapter (http.MaxBytesReader, echo's BodyLimit) on the
// protected path on srv, whose handler answers 201. A longer body, declared
// or chunked, is answered 413, never 400 ("send it again"), and nothing is
// recorded: the same key then runs with a body within the limit. When the
// adapter answers (a chunked body: the limit is only found out by reading),
// the answer is the body-too-large problem and names the limit that cut it.
func CheckOuterBodyLimit(t *testing.T, srv *httptest.Server, path string, limit int) {
	t.Helper()
	key := "k-" + randomHex(6)
	long := []byte(`{"amount":5,"pad":"` + strings.Repeat("x", limit) + `"}`)
	for _, chunked := range []bool{true, false} {
		r := Send(t, srv, path, key, long, chunked, nil)
		if r.Status != http.StatusRequestEntityTooLarge || r.replayed() {
			t.Errorf("%d bytes over a limit of %d (chunked %v): %v %.200s, want 413", len(long), limit, chunked, r, r.Body)
			continue
		}
		if chunked && !bytes.Contains(r.Body, []byte(server.ProblemBodyTooLarge)) {
			t.Errorf("chunked: %s, want the body-too-large problem", r.Body)
		}
		if chunked && !bytes.Contains(r.Body, []byte(fmt.Sprint(limit))) {
			t.Errorf("chunked: %s does not name the limit of %d bytes", r.Body, limit)
		}
	}
	if r := Send(t, srv, path, key, []byte(`{"amount":5}`), true, nil); r.Status != http.StatusCreated || r.replayed() {
		t.Errorf("the same key with a short body: %v %.200s, want 201 executed (nothing was recorded)", r, r.Body)
	}
}
