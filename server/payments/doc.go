// Package payments is the small payments API that idem's store contract suite,
// the in-process test server (server/idemtest) and cmd/idem-server protect.
//
// It is a real handler, not a mock: it validates its input, writes each payment
// to a Ledger (the business write) and answers 201 with the payment. Counting the
// ledger's payments is how every test proves exactly-once execution.
//
//	api := &payments.API{Ledger: payments.NewMemLedger()}
//	mux := http.NewServeMux()
//	mux.Handle("POST /payments", server.Middleware(store)(http.HandlerFunc(api.Create)))
//	mux.HandleFunc("GET /payments", api.List)
package payments
