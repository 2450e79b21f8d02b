package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestReadBodyGrowsWithBytesReceived: a declared Content-Length does not buy
// an allocation of that size (issue 12: 400 header-only connections declaring
// 1 MiB took hundreds of MB); the buffer follows the bytes that arrive.
func TestReadBodyGrowsWithBytesReceived(t *testing.T) {
	t.Parallel()
	r, _ := http.NewRequest(http.MethodPost, "/x", io.NopCloser(strings.NewReader("0123456789")))
	r.ContentLength = 1 << 20 // declared, never sent
	body, err := readBody(r, DefaultMaxBodyBytes)
	if err != nil || string(body) != "0123456789" {
		t.Fatalf("readBody = %q, %v", body, err)
	}
	const most = 64 << 10 // far below the 1 MiB declared
	if c := cap(body); c > most {
		t.Errorf("buffer capacity %d for 10 bytes received, want at most %d", c, most)
	}

	// A body that really is large still arrives whole.
	big := strings.Repeat("x", 300<<10)
	r, _ = http.NewRequest(http.MethodPost, "/x", strings.NewReader(big))
	if body, err := readBody(r, DefaultMaxBodyBytes); err != nil || string(body) != big {
		t.Fatalf("readBody of %d bytes = %d bytes, %v", len(big), len(body), err)
	}
}

// A body cut by http.MaxBytesReader in front of the middleware is a 413
// that names that limit, declared or chunked.
func TestOuterBodyLimitIs413(t *testing.T) {
	t.Parallel()
	h := counting(created)
	mw := Middleware(&fakeStore{})(h)
	limited := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 10)
		mw.ServeHTTP(w, r)
	})
	for _, chunked := range []bool{false, true} {
		r := request("POST", "/p", `{"pad":"0123456789"}`, HeaderKey, "k")
		if chunked {
			r.Body, r.ContentLength = io.NopCloser(io.MultiReader(r.Body)), -1
		}
		rec := serve(limited, r)
		checkProblem(t, rec, http.StatusRequestEntityTooLarge, ProblemBodyTooLarge)
		if !strings.Contains(rec.Body.String(), "limited to 10 bytes") {
			t.Errorf("chunked %v: %s does not name the limit of 10 bytes", chunked, rec.Body)
		}
	}
	if n := h.runs.Load(); n != 0 {
		t.Errorf("the handler ran %d times", n)
	}
}
