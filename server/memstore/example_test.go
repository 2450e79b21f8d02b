package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
