package idemtest

import (
	"context"
	"net/http"
	"net/http/httptest"

	"github.com/idemkit/idem/internal/demo"
	"github.com/idemkit/idem/internal/demo/payments"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/chaos"
	"github.com/idemkit/idem/server/memstore"
)

// Server is the companion server listening on a loopback address.
type Server struct {
	// URL is the base URL, http://127.0.0.1:port, with no trailing slash.
	URL string

	hs     *httptest.Server
	store  server.Store
	ledger *payments.MemLedger
}

// NewServer starts a Server. The caller must Close it. It panics if an option is
// invalid.
func NewServer(opts ...Option) *Server {
	var cfg config
	for _, o := range opts {
		if o == nil {
			panic("idemtest: NewServer(nil Option): want an Option")
		}
		o(&cfg)
	}
	if cfg.store == nil {
		cfg.store = memstore.New()
	}
	// The in-process crash (panic with http.ErrAbortHandler) goes first so that
	// a caller's chaos options may replace it.
	inj := chaos.New(append([]chaos.Option{chaos.WithCrash(abortHandler)}, cfg.chaosOpts...)...)
	ledger := payments.NewMemLedger()
	hs := httptest.NewServer(demo.Handler(cfg.store, ledger, inj, cfg.mwOpts...))
	return &Server{URL: hs.URL, hs: hs, store: cfg.store, ledger: ledger}
}

func abortHandler() { panic(http.ErrAbortHandler) }

// Client returns an HTTP client for the server, like httptest.Server.Client.
func (s *Server) Client() *http.Client { return s.hs.Client() }

// Close shuts the server down and blocks until every request has finished.
func (s *Server) Close() { s.hs.Close() }

// Payments returns how many payments customer has (every customer's when
// customer is empty): the count that proves exactly-once.
func (s *Server) Payments(customer string) int { return s.ledger.Count(customer) }

// PaymentIDs returns the IDs of customer's payments (every customer's when
// customer is empty), oldest first: the IDs a replay must repeat.
func (s *Server) PaymentIDs(customer string) []string {
	ps, _ := s.ledger.List(context.Background(), customer) // the memory ledger never fails
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	return ids
}

// Store returns the idempotency store the server uses.
func (s *Server) Store() server.Store { return s.store }
