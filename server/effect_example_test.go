package server_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

func ExampleDeclareEffect() {
	charges := 0
	create := func(w http.ResponseWriter, r *http.Request) {
		charges++ // the charge at the payment provider: it cannot be undone
		server.DeclareEffect(r.Context())
		http.Error(w, "receipt service down", http.StatusInternalServerError) // a later step fails
	}
	srv := httptest.NewServer(server.Middleware(memstore.New())(http.HandlerFunc(create)))
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"amount":1000}`))
		req.Header.Set(server.HeaderKey, "order-42")
		resp, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, "replayed:", resp.Header.Get(server.HeaderReplayed) == "true")
	}
	fmt.Println("charges:", charges)
	// Output:
	// 500 replayed: false
	// 500 replayed: true
	// charges: 1
}

// A handler that forwards to an API it does not own begins the effect before
// the request leaves, and cancels it when nothing was sent; whatever the
// upstream answers after that, a 502 included, is the operation's outcome.
func ExampleBeginEffect() {
	calls := 0
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++ // the upstream charged, then its answer failed
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer upstream.Close()
	forward := func(w http.ResponseWriter, r *http.Request) {
		if err := server.BeginEffect(r.Context()); err != nil {
			http.Error(w, "try again", http.StatusServiceUnavailable) // nothing was sent
			return
		}
		resp, err := http.Post(upstream.URL, "application/json", r.Body)
		if err != nil {
			// A real gateway calls server.CancelEffect only when the error
			// proves nothing was sent (a refused dial).
			http.Error(w, "upstream unreachable", http.StatusBadGateway)
			return
		}
		resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
	}
	srv := httptest.NewServer(server.Middleware(memstore.New())(http.HandlerFunc(forward)))
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"amount":1000}`))
		req.Header.Set(server.HeaderKey, "order-43")
		resp, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, "replayed:", resp.Header.Get(server.HeaderReplayed) == "true")
	}
	fmt.Println("upstream calls:", calls)
	// Output:
	// 502 replayed: false
	// 502 replayed: true
	// upstream calls: 1
}

// A framework whose handlers return errors, answered by the framework once
// the handler has returned: the adapter runs the handler and answers its
// error inside run, so the error's answer is what is recorded or released.
func ExampleGuard() {
	type handlerFunc func(w http.ResponseWriter, r *http.Request) error
	answerError := func(w http.ResponseWriter, err error) { http.Error(w, err.Error(), http.StatusServiceUnavailable) }
	adapt := func(g *server.Guard, h handlerFunc) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			g.Serve(w, r, func(w http.ResponseWriter, r *http.Request) bool {
				if err := h(w, r); err != nil {
					answerError(w, err)
				}
				return true
			})
		})
	}
	runs := 0
	create := func(w http.ResponseWriter, r *http.Request) error {
		if runs++; runs == 1 {
			return errors.New("database down")
		}
		w.WriteHeader(http.StatusCreated)
		return nil
	}
	srv := httptest.NewServer(adapt(server.NewGuard(memstore.New()), create))
	defer srv.Close()

	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{}`))
		req.Header.Set(server.HeaderKey, "k1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)), "replayed:", resp.Header.Get(server.HeaderReplayed) == "true")
	}
	fmt.Println("runs:", runs)
	// Output:
	// 503 database down replayed: false
	// 201  replayed: false
	// 201  replayed: true
	// runs: 2
}
