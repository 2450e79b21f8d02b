package idemgrpc_test

import (
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/grpc/idemgrpctest"
	"github.com/idemkit/idem/server/memstore"
)

// BenchmarkCall measures a successful unary call over bufconn: bare (no
// interceptor), with idem's client interceptor (a generated key, the retry
// engine, no retry), and with both interceptors (the server's claim, record
// and the memory store). Compare the rows of one run (go test -bench Call
// -count 10 | benchstat): the machine's noise is shared by them.
func BenchmarkCall(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		s := startBufServer(b, nil)
		benchCalls(b, s, false)
	})
	b.Run("client", func(b *testing.B) {
		s := startBufServer(b, nil)
		benchCalls(b, s, true)
	})
	b.Run("client+server", func(b *testing.B) {
		s := startBufServer(b, memstore.New())
		benchCalls(b, s, true)
	})
}

func benchCalls(b *testing.B, s *testServer, interceptor bool) {
	cc := s.rawClient(b)
	if interceptor {
		cc = s.dial(b, idem.WithRetryBudget(nil))
	}
	ctx := b.Context()
	if _, err := idemgrpctest.Call(ctx, cc, idemgrpctest.Charge, "warm"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := idemgrpctest.Call(ctx, cc, idemgrpctest.Charge, "a"); err != nil {
			b.Fatal(err)
		}
	}
}
