package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

// shipRequest is the body of the shipping service's POST /shipments.
type shipRequest struct {
	Order   string `json:"order"` // the payment that paid for it
	Address string `json:"address"`
}

// shipment is one parcel sent: the shipping service's effect.
type shipment struct {
	ID      string `json:"id"`
	Order   string `json:"order"`
	Address string `json:"address"`
}

// shipping is a small downstream service: POST /shipments behind
// server.Middleware (memory store, scoped by bearer token), like any service
// that takes Idempotency-Key. Its shipments are what the tests count.
type shipping struct {
	mu        sync.Mutex
	shipments []shipment
	down      atomic.Int32 // the next n requests are answered 503
}

// handler returns the service's routes.
func (s *shipping) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /shipments", server.Middleware(memstore.New(),
		server.WithScope(server.BearerScope))(http.HandlerFunc(s.create)))
	return mux
}

// outage makes the next n requests fail with 503, as a service that is briefly
// down. A 5xx is not recorded: the key is released and a retry runs again.
func (s *shipping) outage(n int) { s.down.Store(int32(n)) }

func (s *shipping) create(w http.ResponseWriter, r *http.Request) {
	if n := s.down.Load(); n > 0 && s.down.CompareAndSwap(n, n-1) {
		writeProblem(w, server.Problem{Type: "about:blank", Title: "Shipping unavailable",
			Status: http.StatusServiceUnavailable, RetryAfter: time.Second})
		return
	}
	var in shipRequest
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Order == "" || in.Address == "" {
		writeProblem(w, server.Problem{Type: "about:blank", Title: "Invalid shipment",
			Status: http.StatusBadRequest, Detail: `want {"order":..., "address":...}`})
		return
	}
	s.mu.Lock()
	sh := shipment{ID: fmt.Sprintf("shp_%d", len(s.shipments)+1), Order: in.Order, Address: in.Address}
	s.shipments = append(s.shipments, sh)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(sh)
}

// count returns how many shipments were made for order ("" for all).
func (s *shipping) count(order string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, sh := range s.shipments {
		if order == "" || sh.Order == order {
			n++
		}
	}
	return n
}
