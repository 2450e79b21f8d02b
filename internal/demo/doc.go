// Package demo is the demo payments server that cmd/idem-server and
// server/idemtest serve, bench and e2e measure, and the examples start from:
// the payments API (internal/demo/payments) behind server.Middleware, with
// the fault injector of server/chaos around it.
//
// It is demo code, not library API: it lives under internal/ so that a user of
// the library never imports it, and the library (server, its stores, the
// contract suite server/storetest) depends on none of it. The PostgreSQL
// ledger of the demo, which needs pgx, is the nested module
// internal/demo/pgledger.
package demo
