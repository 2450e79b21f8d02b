package server_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
	"github.com/idemkit/idem/server/payments"
)

func ExampleMiddleware() {
	api := &payments.API{Ledger: payments.NewMemLedger(), NewID: func() string { return "pay_1" }}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", server.Middleware(memstore.New(),
		server.WithFingerprint(server.CanonicalJSON),
	)(http.HandlerFunc(api.Create)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	post := func(key, body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(body))
		if key != "" {
			req.Header.Set(server.HeaderKey, key)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		line := fmt.Sprint(resp.StatusCode, " ", resp.Header.Get("Location"))
		if resp.Header.Get(server.HeaderReplayed) == "true" {
			line += " (replayed)"
		}
		fmt.Println(strings.TrimSpace(line))
	}
	post("order-42", `{"customer":"ada","amount":1000,"currency":"EUR"}`)
	post("order-42", `{ "currency": "EUR", "amount": 1000, "customer": "ada" }`) // same JSON: replayed
	post("order-42", `{"customer":"ada","amount":2000,"currency":"EUR"}`)        // other request: 422
	post("", `{"customer":"ada","amount":1000,"currency":"EUR"}`)                // no key: 400
	// Output:
	// 201 /payments/pay_1
	// 201 /payments/pay_1 (replayed)
	// 422
	// 400
}

func ExampleParseKey() {
	for _, v := range []string{`abc`, `"abc"`, `"a\"b"`, `"abc`, `a b`} {
		k, err := server.ParseKey(v)
		fmt.Printf("%-8s -> %q %v\n", v, k, err)
	}
	// Output:
	// abc      -> "abc" <nil>
	// "abc"    -> "abc" <nil>
	// "a\"b"   -> "a\"b" <nil>
	// "abc     -> "" idem/server: invalid Idempotency-Key: missing closing quote
	// a b      -> "" idem/server: invalid Idempotency-Key: character 0x20 at offset 1 is not visible ASCII
}
