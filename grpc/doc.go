// Package idemgrpc is idem for gRPC: a unary client interceptor that gives each
// logical call one idempotency key and retries it only where that is safe, on
// the retry engine and the policy (idem.Option, idem.Budget, idem.Report) of
// the HTTP Transport, and a unary server interceptor that implements the
// server side of the contract (docs/CONTRACT.md, "Over gRPC" in §3) on the same stores as the
// HTTP middleware (memstore, pgstore, redisstore): a missing or reused key
// refused, a duplicate in progress told to come back, the recorded answer of
// the first execution replayed to every retry.
//
//	conn, err := grpc.NewClient(addr, grpc.WithDisableRetry(),
//		grpc.WithChainUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
//
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(idemgrpc.UnaryServerInterceptor(memstore.New())))
//
// Streaming calls are not protected: the client interceptor is unary only, and
// the server interceptor does not see streams. docs/grpc.md has the quick
// start and the mapping of the contract onto status codes.
package idemgrpc
