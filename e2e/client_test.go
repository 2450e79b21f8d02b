package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/idemkit/idem"
)

// retries records the retries of a client's operations.
type retries struct {
	mu     sync.Mutex
	events []idem.AttemptInfo
	hook   func() // run on each retry, before the wait (nil: none)
}

func (r *retries) onRetry(_ context.Context, ev idem.AttemptInfo) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	hook := r.hook
	r.mu.Unlock()
	if hook != nil {
		hook()
	}
}

func (r *retries) all() []idem.AttemptInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]idem.AttemptInfo(nil), r.events...)
}

// baseTransport is what the idem clients of these tests send through. Keep-alives
// are off: net/http resends a keyed request by itself when a reused connection
// dies before the response, an attempt idem (and these tests) would not see.
func baseTransport() *http.Transport {
	return &http.Transport{DisableKeepAlives: true}
}

// paymentBody is the JSON of a payment of customer.
func paymentBody(customer string) string {
	return fmt.Sprintf(`{"customer":%q,"amount":1250,"currency":"EUR"}`, customer)
}

// reply is how one logical payment ended.
type reply struct {
	status   int
	replayed bool
	key      string // the key the operation used
	body     []byte
	bodyErr  error // reading the body failed (the response was cut)
}

// postPayment runs one logical payment for customer through client. ctx may
// carry a key (idem.ContextWithKey). A transport error is returned as it is.
func postPayment(ctx context.Context, client *http.Client, url, customer string) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/payments", strings.NewReader(paymentBody(customer)))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode, replayed: idem.Replayed(resp), key: keyOf(resp)}
	r.body, r.bodyErr = io.ReadAll(resp.Body)
	return r, nil
}

// keyOf returns the key the operation that answered resp sent.
func keyOf(resp *http.Response) string {
	a, _ := idem.AttemptFromContext(resp.Request.Context())
	return a.Key
}
