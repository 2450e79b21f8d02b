package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/server"
)

// checkoutRequest is the body a mobile client sends to POST /checkout.
type checkoutRequest struct {
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Address  string `json:"address"`
}

// checkoutResponse is the BFF's answer to a completed checkout.
type checkoutResponse struct {
	Payment  string `json:"payment"`
	Shipment string `json:"shipment"`
}

// step is the outcome of one downstream call.
type step struct {
	Status   int    // the downstream status, 0 if the call failed
	Replayed bool   // the downstream replayed its stored response
	ID       string // the id of what it created, when Status is 201
	Err      error  // the transport error, if any
}

// checkoutEvent reports one POST /checkout the BFF handled.
type checkoutEvent struct {
	Key          string // the upstream Idempotency-Key
	Charge, Ship step   // Ship is zero when the charge failed
	Status       int    // what the BFF answered
}

// checkout is the BFF's POST /checkout handler. It keeps no state of its own:
// it charges the customer through the payments service and then books the
// parcel with the shipping service, sending each an Idempotency-Key derived
// from the upstream key (idem.DeriveKey(key, "charge"), idem.DeriveKey(key,
// "ship")). When the mobile client retries a checkout with its key, the
// handler runs again and sends the same downstream keys, so each downstream
// effect happens once: whatever already succeeded is replayed, whatever failed
// runs now.
//
// It forwards the caller's Authorization header, so that each downstream
// service scopes keys by the end user: two users who happen to send the same
// key never share a charge.
type checkout struct {
	payments, shipping string       // base URLs of the downstream services
	client             *http.Client // an idem client: it sends the key that the context carries
	onCheckout         func(checkoutEvent)
}

// newCheckout returns the handler. Its downstream client makes one attempt per
// call: the mobile client is the one layer that retries (see "Only one layer
// should retry" in the idem package documentation); a retry of the whole
// checkout is what repairs a half-done one.
func newCheckout(payments, shipping string, onCheckout func(checkoutEvent)) *checkout {
	return &checkout{
		payments:   payments,
		shipping:   shipping,
		client:     &http.Client{Transport: idem.NewTransport(&http.Transport{}, idem.WithMaxAttempts(1))},
		onCheckout: onCheckout,
	}
}

func (c *checkout) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, err := server.ParseKey(r.Header.Get(server.HeaderKey))
	if err != nil {
		problem(w, http.StatusBadRequest, "Idempotency-Key required", "send the checkout's key: "+err.Error())
		return
	}
	var in checkoutRequest
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		problem(w, http.StatusBadRequest, "Malformed checkout", err.Error())
		return
	}
	ev, detail := c.run(r.Context(), key, r.Header.Get("Authorization"), in)
	if c.onCheckout != nil {
		c.onCheckout(ev) // before answering: the caller sees the event first
	}
	if ev.Status != http.StatusCreated {
		problem(w, ev.Status, "Checkout failed", detail)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(checkoutResponse{Payment: ev.Charge.ID, Shipment: ev.Ship.ID})
}

// run charges, then ships. It returns what happened and, when the checkout
// failed, why.
func (c *checkout) run(ctx context.Context, key, auth string, in checkoutRequest) (checkoutEvent, string) {
	ev := checkoutEvent{Key: key}
	ev.Charge = c.call(ctx, idem.DeriveKey(key, "charge"), c.payments+"/payments", auth,
		map[string]any{"customer": in.Customer, "amount": in.Amount, "currency": in.Currency})
	if ev.Status = answer(ev.Charge); ev.Status != http.StatusCreated {
		return ev, describe("payments", ev.Charge)
	}
	ev.Ship = c.call(ctx, idem.DeriveKey(key, "ship"), c.shipping+"/shipments", auth,
		shipRequest{Order: ev.Charge.ID, Address: in.Address})
	if ev.Status = answer(ev.Ship); ev.Status != http.StatusCreated {
		return ev, describe("shipping", ev.Ship) + "; the charge stands: retry the checkout with the same key"
	}
	return ev, ""
}

// call POSTs body as JSON to url with key as its Idempotency-Key.
func (c *checkout) call(ctx context.Context, key, url, auth string, body any) step {
	b, err := json.Marshal(body)
	if err != nil {
		return step{Err: err}
	}
	req, err := http.NewRequestWithContext(idem.ContextWithKey(ctx, key), http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return step{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return step{Err: err}
	}
	defer resp.Body.Close()
	s := step{Status: resp.StatusCode, Replayed: idem.Replayed(resp)}
	if resp.StatusCode == http.StatusCreated {
		var created struct {
			ID string `json:"id"`
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&created); err != nil {
			return step{Status: resp.StatusCode, Err: fmt.Errorf("decoding the response: %w", err)}
		}
		s.ID = created.ID
	}
	return s
}

// answer maps a downstream outcome to the BFF's status: 201 on success; a 4xx
// that is the caller's business (such as 422, the key reused with another
// checkout) as it is; anything else 502.
func answer(s step) int {
	switch {
	case s.Err != nil:
		return http.StatusBadGateway
	case s.Status == http.StatusCreated:
		return http.StatusCreated
	case s.Status == http.StatusBadRequest, s.Status == http.StatusUnprocessableEntity:
		return s.Status
	}
	return http.StatusBadGateway
}

func describe(service string, s step) string {
	if s.Err != nil {
		return service + ": " + s.Err.Error()
	}
	return fmt.Sprintf("%s answered %d", service, s.Status)
}

func problem(w http.ResponseWriter, status int, title, detail string) {
	writeProblem(w, server.Problem{Type: "about:blank", Title: title, Status: status, Detail: detail})
}

// writeProblem sends p as RFC 9457 application/problem+json.
func writeProblem(w http.ResponseWriter, p server.Problem) {
	body, _ := json.Marshal(p) // a Problem always marshals
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int((p.RetryAfter+time.Second-1)/time.Second)))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}
