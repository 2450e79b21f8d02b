package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

// A full store refuses new keys, and never evicts a live record to make room.
func ExampleWithMaxEntries() {
	store := memstore.New(memstore.WithMaxEntries(1))
	run := func(context.Context) (*server.Response, bool) {
		return &server.Response{Status: http.StatusCreated, Body: []byte("done")}, true
	}
	req := server.Request{Key: "first", Fingerprint: "fp", TTL: time.Hour}
	res, err := store.Do(context.Background(), req, run)
	fmt.Println(res.Outcome, err)

	req.Key = "second"
	_, err = store.Do(context.Background(), req, run)
	fmt.Println(errors.Is(err, memstore.ErrFull))

	req.Key = "first"
	res, _ = store.Do(context.Background(), req, run)
	fmt.Println(res.Outcome, string(res.Response.Body))
	fmt.Printf("%+v\n", store.Stats())
	// Output:
	// executed <nil>
	// true
	// replayed done
	// {Entries:1 Bytes:267 Evictions:0 FullRefusals:1}
}

// The memory store behind the middleware: the handler runs once per key, and a
// retry with the same key gets the recorded answer.
func ExampleNew() {
	runs := 0
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "payment %d\n", runs)
	})
	srv := httptest.NewServer(server.Middleware(memstore.New())(create))
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"amount":1000}`))
		req.Header.Set(server.HeaderKey, "order-7")
		resp, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %q replayed=%s\n", resp.StatusCode, body, resp.Header.Get(server.HeaderReplayed))
	}
	fmt.Println("runs:", runs)
	// Output:
	// 201 "payment 1\n" replayed=
	// 201 "payment 1\n" replayed=true
	// runs: 1
}
