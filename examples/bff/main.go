// Command bff shows a backend-for-frontend that stays exactly-once without a
// store of its own, by deriving its downstream keys from the upstream key.
//
//	go run ./examples/bff
//
// A mobile app sends POST /checkout with an Idempotency-Key it keeps with the
// cart (idem.KeyFor("checkout", cartID), so it survives an app restart). The
// BFF charges the customer through a payments service (server/idemtest) and
// books the parcel with a shipping service (a small handler behind
// server.Middleware), sending them idem.DeriveKey(key, "charge") and
// idem.DeriveKey(key, "ship"). The transcript shows each checkout the BFF
// handles:
//
//  1. shipping is down for one request: the charge is made, shipping fails,
//     the BFF answers 502;
//  2. the app's idem client retries: the charge is replayed, the parcel is
//     booked;
//  3. the app restarts and sends the cart again, twice: both downstream calls
//     are replayed, nothing new happens;
//  4. another cart, another key: a new charge and a new parcel.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/server/idemtest"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bff:", err)
		os.Exit(1)
	}
}

// system is the BFF with its two downstream services.
type system struct {
	payments *idemtest.Server
	ship     *shipping
	bff      *httptest.Server
	closers  []func()
}

// start runs the payments and shipping services and the BFF in front of
// them; onCheckout, if not nil, sees every checkout the BFF handles.
func start(onCheckout func(*system, checkoutEvent)) *system {
	s := &system{payments: idemtest.NewServer(), ship: &shipping{}}
	shipSrv := httptest.NewServer(s.ship.handler())
	var hook func(checkoutEvent)
	if onCheckout != nil {
		hook = func(ev checkoutEvent) { onCheckout(s, ev) }
	}
	bff := newCheckout(s.payments.URL, shipSrv.URL, hook)
	mux := http.NewServeMux()
	mux.Handle("POST /checkout", bff)
	s.bff = httptest.NewServer(mux)
	s.closers = []func(){s.bff.Close, bff.client.CloseIdleConnections, shipSrv.Close, s.payments.Close}
	return s
}

func (s *system) close() {
	for _, c := range s.closers {
		c()
	}
}

// mobile returns the app's client: an idem client that retries a failed
// checkout a few times, quickly.
func mobile() *http.Client {
	return &http.Client{Transport: idem.NewTransport(&http.Transport{},
		idem.WithMaxAttempts(3), idem.WithBackoff(20*time.Millisecond, 100*time.Millisecond),
		idem.WithMaxElapsed(5*time.Second))}
}

// checkoutBody is the cart the app sends.
func checkoutBody(customer string) string {
	return fmt.Sprintf(`{"customer":%q,"amount":4999,"currency":"EUR","address":"1 Rue de la Paix, Paris"}`, customer)
}

// send POSTs a checkout with key as the user with token, and returns the
// status and the decoded answer.
func send(client *http.Client, url, key, token, body string) (int, checkoutResponse, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/checkout", strings.NewReader(body))
	if err != nil {
		return 0, checkoutResponse{}, err
	}
	req.Header.Set("Idempotency-Key", key) // the app's own key, kept with the cart
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, checkoutResponse{}, err
	}
	defer resp.Body.Close()
	var out checkoutResponse
	if resp.StatusCode == http.StatusCreated {
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return resp.StatusCode, out, err
		}
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	return resp.StatusCode, out, nil
}

// stepText describes a downstream call in a transcript column.
func stepText(s step) string {
	switch {
	case s.Err != nil:
		return "error"
	case s.Status == 0:
		return "-"
	case s.Status != http.StatusCreated:
		return strconv.Itoa(s.Status)
	case s.Replayed:
		return "201 replayed"
	}
	return "201 new"
}

const lineFormat = "%-3s  %-8s  %-12s  %-12s  %-6s  %-8s  %s\n"

// run tells the story on w.
func run(w io.Writer) error {
	var (
		mu   sync.Mutex
		n    int
		werr error
	)
	printf := func(format string, args ...any) {
		if werr == nil {
			_, werr = fmt.Fprintf(w, format, args...)
		}
	}
	sys := start(func(sys *system, ev checkoutEvent) {
		mu.Lock()
		defer mu.Unlock()
		n++
		printf(lineFormat, strconv.Itoa(n), ev.Key[:8], stepText(ev.Charge), stepText(ev.Ship),
			strconv.Itoa(ev.Status), strconv.Itoa(sys.payments.Payments("")), strconv.Itoa(sys.ship.count("")))
	})
	defer sys.close()
	app := mobile()
	defer app.CloseIdleConnections()

	note := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		printf(format, args...)
	}
	note("mobile app -> BFF POST /checkout -> payments (key = DeriveKey(key, \"charge\"))\n")
	note("                                 -> shipping (key = DeriveKey(key, \"ship\"))\n\n")
	note(lineFormat, "#", "key", "charge", "ship", "answer", "payments", "shipments")

	const token = "user-ada"
	cart42 := idem.KeyFor("checkout", "cart-42")
	note("-- cart-42; shipping is down for one request; the app's client retries\n")
	sys.ship.outage(1)
	status, first, err := send(app, sys.bff.URL, cart42, token, checkoutBody("cus_ada"))
	if err != nil {
		return err
	}
	note("   app got %d: payment %s, shipment %s\n", status, first.Payment, first.Shipment)

	note("-- the app restarts and sends cart-42 again, twice (same key, from KeyFor)\n")
	for range 2 {
		status, again, err := send(app, sys.bff.URL, cart42, token, checkoutBody("cus_ada"))
		if err != nil {
			return err
		}
		note("   app got %d: payment %s, shipment %s (same: %t)\n", status, again.Payment, again.Shipment, again == first)
	}

	note("-- cart-43: another key, new effects\n")
	status, other, err := send(app, sys.bff.URL, idem.KeyFor("checkout", "cart-43"), token, checkoutBody("cus_ada"))
	if err != nil {
		return err
	}
	note("   app got %d: payment %s, shipment %s\n", status, other.Payment, other.Shipment)
	note("\n2 carts: %d payments, %d shipments\n", sys.payments.Payments(""), sys.ship.count(""))
	mu.Lock()
	defer mu.Unlock()
	return werr
}
