// Command idem-check checks, from the outside, how one operation of any HTTP
// API honours Idempotency-Key, against draft-ietf-httpapi-idempotency-key-header
// (revision 07) and Stripe's documented idempotent requests, and prints a
// row per expectation (PASS, WARN, FAIL, SKIP) with what was expected, what
// came back and the words behind it.
//
//	go install github.com/idemkit/idem/cmd/idem-check@latest
//	idem-check -url https://api.example.com/v1/payments \
//	  -body '{"customer":"cus_{{id}}","amount":1999,"currency":"EUR"}' \
//	  -H 'Authorization: Bearer sk_test_A' -H 'Content-Type: application/json' \
//	  -H2 'Authorization: Bearer sk_test_B' -slow-H 'Chaos-Delay: 2s' -fail-H 'Chaos-Fail: 500' \
//	  -ttl 24h -max-wait 10m -X POST,PUT -strict \
//	  -chaos -effect-url 'https://api.example.com/v1/payments?customer=cus_{{id}}' -effect-json count
//
// It sends only to -url (with -chaos through a loopback proxy of its own)
// and -effect-url, at most the number of requests it announces on standard
// error before the first, within the time it announces; the table goes to
// standard output (-json for JSON instead, -json-file FILE and -junit FILE
// for JSON and JUnit XML as well). Exit status: 0 when no row failed, 1 for
// a FAIL (with -strict, a WARN or a SKIP too) or an error, 2 for a bad
// command line.
//
// Its rows, flags and outputs are described in README.md beside this file;
// package check is the engine, for Go tests.
package main
