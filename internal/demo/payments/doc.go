// Package payments is the demo payments API that cmd/idem-server,
// server/idemtest, bench, e2e and the examples serve behind idem's middleware.
// It is demo code, not library API: it lives under internal/ so that no user
// of the library imports it.
//
// It is a real handler, not a mock: it validates its input, writes each payment
// to a Ledger (the business write) and answers 201 with the payment. Counting the
// ledger's payments is how the demo proves exactly-once execution.
//
//	api := &payments.API{Ledger: payments.NewMemLedger()}
//	mux := http.NewServeMux()
//	mux.Handle("POST /payments", server.Middleware(store)(http.HandlerFunc(api.Create)))
//	mux.HandleFunc("GET /payments", api.List)
package payments
