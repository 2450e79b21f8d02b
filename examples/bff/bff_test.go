package main

import (
	"bytes"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
)

// recorder collects the checkouts a BFF handled.
type recorder struct {
	mu     sync.Mutex
	events []checkoutEvent
}

func (r *recorder) add(_ *system, ev checkoutEvent) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

func (r *recorder) all() []checkoutEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]checkoutEvent(nil), r.events...)
}

// once sends one attempt per call: the tests play the mobile app's retries.
var once = &http.Client{}

func mustSend(t *testing.T, url, key, token, body string) (int, checkoutResponse) {
	t.Helper()
	status, out, err := send(once, url, key, token, body)
	if err != nil {
		t.Fatalf("checkout %s: %v", key, err)
	}
	return status, out
}

// TestUpstreamRetries: a checkout retried 3 times by the app charges and ships
// once; every answer names the same payment and shipment; a different upstream
// key makes new effects.
func TestUpstreamRetries(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	sys := start(rec.add)
	defer sys.close()
	key := idem.KeyFor("checkout", "cart-1")

	status, first := mustSend(t, sys.bff.URL, key, "user-1", checkoutBody("cus_1"))
	if status != http.StatusCreated || first.Payment == "" || first.Shipment == "" {
		t.Fatalf("first checkout = %d %+v", status, first)
	}
	for i := range 3 {
		status, again := mustSend(t, sys.bff.URL, key, "user-1", checkoutBody("cus_1"))
		if status != http.StatusCreated || again != first {
			t.Fatalf("retry %d = %d %+v, want 201 %+v", i+1, status, again, first)
		}
	}
	if p, s := sys.payments.Payments("cus_1"), sys.ship.count(first.Payment); p != 1 || s != 1 {
		t.Fatalf("after 4 checkouts with one key: %d payments, %d shipments; want 1 and 1", p, s)
	}
	evs := rec.all()
	if len(evs) != 4 {
		t.Fatalf("BFF handled %d checkouts, want 4", len(evs))
	}
	for i, ev := range evs {
		replayed := i > 0 // the first executes, the retries replay, downstream
		if ev.Charge.Replayed != replayed || ev.Ship.Replayed != replayed {
			t.Errorf("checkout %d: charge replayed %t, ship replayed %t; want %t", i+1, ev.Charge.Replayed, ev.Ship.Replayed, replayed)
		}
	}

	status, other := mustSend(t, sys.bff.URL, idem.KeyFor("checkout", "cart-2"), "user-1", checkoutBody("cus_1"))
	if status != http.StatusCreated || other.Payment == first.Payment || other.Shipment == first.Shipment {
		t.Fatalf("another key = %d %+v, want new effects (first %+v)", status, other, first)
	}
	if p, s := sys.payments.Payments("cus_1"), sys.ship.count(""); p != 2 || s != 2 {
		t.Errorf("after two carts: %d payments, %d shipments; want 2 and 2", p, s)
	}
}

// TestHalfDoneCheckout: shipping fails after the charge; the app's retry with
// the same key replays the charge and ships: one of each.
func TestHalfDoneCheckout(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	sys := start(rec.add)
	defer sys.close()
	key := idem.KeyFor("checkout", "cart-9")
	sys.ship.outage(1)

	if status, _ := mustSend(t, sys.bff.URL, key, "user-9", checkoutBody("cus_9")); status != http.StatusBadGateway {
		t.Fatalf("checkout during the outage = %d, want 502", status)
	}
	if p, s := sys.payments.Payments("cus_9"), sys.ship.count(""); p != 1 || s != 0 {
		t.Fatalf("after the failed checkout: %d payments, %d shipments; want 1 and 0", p, s)
	}
	status, out := mustSend(t, sys.bff.URL, key, "user-9", checkoutBody("cus_9"))
	if status != http.StatusCreated {
		t.Fatalf("retry = %d, want 201", status)
	}
	if p, s := sys.payments.Payments("cus_9"), sys.ship.count(out.Payment); p != 1 || s != 1 {
		t.Errorf("after the retry: %d payments, %d shipments; want 1 and 1", p, s)
	}
	if evs := rec.all(); len(evs) != 2 || !evs[1].Charge.Replayed || evs[1].Ship.Replayed {
		t.Errorf("events = %+v, want the retry to replay the charge and ship anew", evs)
	}
}

// TestKeysAreScopedAndBound: the same upstream key from another user is
// another checkout (the BFF forwards the user's token, downstream scopes by
// it); the same key with another cart is refused with 422.
func TestKeysAreScopedAndBound(t *testing.T) {
	t.Parallel()
	sys := start(nil)
	defer sys.close()
	const key = "checkout-1" // a careless app: the same key for everyone

	tests := []struct {
		name, token, customer string
		want                  int
		payments              int // of customer, afterwards
	}{
		{"first user", "user-a", "cus_a", http.StatusCreated, 1},
		{"another user, same key", "user-b", "cus_b", http.StatusCreated, 1},
		{"first user, same key, another cart", "user-a", "cus_other", http.StatusUnprocessableEntity, 0},
	}
	for _, tt := range tests { // in order: each case builds on the one before
		t.Run(tt.name, func(t *testing.T) {
			if status, _ := mustSend(t, sys.bff.URL, key, tt.token, checkoutBody(tt.customer)); status != tt.want {
				t.Errorf("status = %d, want %d", status, tt.want)
			}
			if n := sys.payments.Payments(tt.customer); n != tt.payments {
				t.Errorf("payments of %s = %d, want %d", tt.customer, n, tt.payments)
			}
		})
	}
	if n := sys.ship.count(""); n != 2 {
		t.Errorf("shipments = %d, want 2", n)
	}
}

// TestMissingKey: the BFF needs the app's key to derive its own.
func TestMissingKey(t *testing.T) {
	t.Parallel()
	sys := start(nil)
	defer sys.close()
	resp, err := once.Post(sys.bff.URL+"/checkout", "application/json", strings.NewReader(checkoutBody("cus_x")))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || sys.payments.Payments("") != 0 {
		t.Errorf("no key: %d, %d payments; want 400 and none", resp.StatusCode, sys.payments.Payments(""))
	}
}

// TestRun runs the demo and checks its outcome.
func TestRun(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := run(&buf); err != nil {
		t.Fatalf("run: %v\n%s", err, buf.String())
	}
	out := buf.String()
	for _, s := range []string{
		"201 new       503           502     1         0",
		"201 replayed  201 new       201     1         1",
		"(same: true)",
		"201 new       201 new       201     2         2",
		"2 carts: 2 payments, 2 shipments",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("transcript lacks %q:\n%s", s, out)
		}
	}
}
