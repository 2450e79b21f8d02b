package check

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// The proxy sends every request to the one target URL, never passes its own
// marker on, and loses the answer only of a request that asks for it, after
// the server answered.
func TestLossyProxy(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.String()+" lose="+r.Header.Get(loseHeader)+" key="+r.Header.Get("Idempotency-Key")+" "+string(body))
		mu.Unlock()
		w.Header().Set("X-Answer", "yes")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "done")
	}))
	defer srv.Close()
	p, err := startProxy(srv.URL+"/op?x=1", http.MethodPost, srv.Client().Transport)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

	send := func(path string, lose bool) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, p.URL()+path, strings.NewReader("b"))
		req.Header.Set("Idempotency-Key", "k")
		if lose {
			req.Header.Set(loseHeader, "1")
		}
		return client.Do(req)
	}
	if resp, err := send("", true); err == nil {
		resp.Body.Close()
		t.Fatalf("a lost answer arrived: %s", resp.Status)
	}
	resp, err := send("elsewhere", false)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || string(body) != "done" || resp.Header.Get("X-Answer") != "yes" {
		t.Errorf("forwarded answer %s %q %v", resp.Status, body, resp.Header)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"POST /op?x=1 lose= key=k b", "POST /op?x=1 lose= key=k b"}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("the server saw\n%s\nwant\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}
