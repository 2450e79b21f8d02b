package idemtest_test

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem/server/idemtest"
)

// A retry with the same Idempotency-Key is answered from the record: one charge.
func ExampleNewServer() {
	srv := idemtest.NewServer()
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments",
			strings.NewReader(`{"customer":"cus_42","amount":1999,"currency":"EUR"}`))
		req.Header.Set("Idempotency-Key", "order-42")
		resp, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	fmt.Println("payments:", srv.Payments("cus_42"))
	// Output:
	// 201 replayed: false
	// 201 replayed: true
	// payments: 1
}
