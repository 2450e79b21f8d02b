package server_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

func ExampleMiddleware() {
	charges := 0
	create := func(w http.ResponseWriter, r *http.Request) {
		charges++ // the business write
		w.Header().Set("Location", fmt.Sprintf("/payments/pay_%d", charges))
		w.WriteHeader(http.StatusCreated)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", server.Middleware(memstore.New(),
		server.WithFingerprint(server.CanonicalJSON),
	)(http.HandlerFunc(create)))
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
	fmt.Println("charges:", charges)
	// Output:
	// 201 /payments/pay_1
	// 201 /payments/pay_1 (replayed)
	// 422
	// 400
	// charges: 1
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
