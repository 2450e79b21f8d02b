// Command payments tells the double-charge story in a transcript you can read:
// why retrying a POST by hand charges a customer twice, and how idem's client
// and server make the same retries charge once.
//
//	go run ./examples/payments
//
// It starts the companion server in-process (server/idemtest, on the memory
// store) behind a small gateway that, like most load balancers, keeps a request
// running upstream after its client hangs up. The fault is the same in each
// story: the first request the server sees is slow (Chaos-Delay: 1s), and
// the clients stop waiting after 300ms.
//
//	(a) A plain http.Client (Timeout 300ms) and a hand-rolled retry loop on
//	    POST /payments/unprotected: the first request times out, the loop sends
//	    it again, and once the slow one finishes the customer has paid twice.
//	(b) The idem client on POST /payments: the first attempt times out, but
//	    idem keeps listening for its answer; the retry, with the same
//	    Idempotency-Key, gets 409 and a short Retry-After (1s: when the answer
//	    should exist) while the first still runs; when the first finishes, its
//	    own 201 ends the operation. One charge.
//	(c) The same key sent again: with the same body, the recorded 201 comes
//	    back (Idempotent-Replayed: true) and nothing is charged; with another
//	    amount, it is refused with 422.
//
// Each line shows the step, the attempt, the status, the key (its first 8
// characters), whether the response was a replay, and how many payments the
// customer has at that moment. The run takes about 2 seconds.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/idemtest"
)

// The story's timings.
const (
	clientTimeout = 300 * time.Millisecond // how long the clients wait for an answer
	serverDelay   = time.Second            // how slow the first request is
	// The server answers a duplicate at once (it would wait up to 5 s by
	// default, bounded by the Prefer: wait of a client that can wait a
	// second or more), so that the 409 shows in the transcript: it says
	// Retry-After: 1, when the answer should exist. The first attempt's own
	// answer comes before that.
	duplicateWait = 0
	settleWithin  = 10 * time.Second // bound on waiting for the gateway to go idle
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1)
	}
}

// demo is the running system: the server, the gateway in front of it, and
// the transcript.
type demo struct {
	srv *idemtest.Server
	gw  *gateway
	url string // the gateway's URL: where clients send requests
	t   *transcript
}

// run tells the stories on w.
func run(w io.Writer) error {
	start := time.Now()
	srv := idemtest.NewServer(idemtest.WithMiddlewareOptions(server.WithInProgressWait(duplicateWait)))
	defer srv.Close()
	gw := newGateway(srv.URL)
	front := httptest.NewServer(gw)
	defer front.Close() // first: waits for the gateway's requests to finish
	d := &demo{srv: srv, gw: gw, url: front.URL, t: &transcript{w: w}}

	d.t.printf("idem payments demo: payments server (memory store) behind a gateway that keeps\n")
	d.t.printf("working after a client hangs up. Fault: the first request is slow (%v);\n", serverDelay)
	d.t.printf("clients wait %v.\n", clientTimeout)

	if err := d.naive(); err != nil {
		return err
	}
	key, err := d.withIdem()
	if err != nil {
		return err
	}
	if err := d.reuse(key); err != nil {
		return err
	}
	d.t.printf("\none purchase each: cus_alice (naive retry) has %d payments, cus_bob (idem) has %d\n",
		srv.Payments("cus_alice"), srv.Payments("cus_bob"))
	d.t.printf("done in %v\n", time.Since(start).Round(10*time.Millisecond))
	return d.t.err
}

// payment returns the JSON body of a payment.
func payment(customer string, amount int) string {
	return fmt.Sprintf(`{"customer":%q,"amount":%d,"currency":"EUR"}`, customer, amount)
}

// naive is story (a): a plain client, a retry loop, no key, no protection.
func (d *demo) naive() error {
	const customer = "cus_alice"
	d.t.header("(a) plain http.Client + hand-rolled retry loop, POST /payments/unprotected")
	client := &http.Client{
		Timeout:   clientTimeout,
		Transport: &sender{next: &http.Transport{}, delay: serverDelay.String()},
	}
	defer client.CloseIdleConnections()
	sent := 0
	for attempt := 1; attempt <= 3; attempt++ {
		// No Idempotency-Key: net/http never resends this POST by itself, so
		// every extra request is the loop's.
		sent++
		resp, err := client.Post(d.url+"/payments/unprotected", "application/json",
			strings.NewReader(payment(customer, 1999)))
		if err != nil {
			d.t.line("a", attempt, errorText(err, clientTimeout), "", "-", d.srv.Payments(customer))
			continue // the naive loop: it failed, so send it again
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("(a) reading the response: %w", err)
		}
		d.t.line("a", attempt, statusText(resp, body), "", replayedText(resp), d.srv.Payments(customer))
		if resp.StatusCode < 500 {
			break
		}
	}
	if err := d.gw.await(sent, settleWithin); err != nil {
		return err
	}
	d.t.line("a", 0, "(the slow first request finished)", "", "-", d.srv.Payments(customer))
	return nil
}

// idemClient returns the idem client of stories (b) and (c), reporting each
// retry as a transcript line of step for customer, and the sender under it.
// With slow, the first request it sends asks the server for the story's delay.
func (d *demo) idemClient(step, customer string, slow bool) (*http.Client, *sender) {
	// Keep-alives off: net/http resends a keyed request by itself when a reused
	// connection dies before the response; every attempt here is idem's.
	s := &sender{next: &http.Transport{DisableKeepAlives: true}}
	if slow {
		s.delay = serverDelay.String()
	}
	return &http.Client{Transport: idem.NewTransport(s,
		idem.WithAttemptTimeout(clientTimeout),
		idem.WithBackoff(50*time.Millisecond, 500*time.Millisecond),
		idem.WithMaxElapsed(8*time.Second),
		idem.WithOnRetry(func(_ context.Context, ev idem.AttemptInfo) {
			text := retryText(ev, clientTimeout)
			if ev.Reason == "attempt-timeout" {
				text += ", kept open" // a keyed attempt goes on past its time-out
			}
			d.t.line(step, ev.Number-1, text, shortKey(ev.Key), "-", d.srv.Payments(customer))
		}),
	)}, s
}

// withIdem is story (b): the same fault, the idem client, the protected
// route. It returns the operation's key.
func (d *demo) withIdem() (string, error) {
	const customer = "cus_bob"
	d.t.header("(b) idem client, POST /payments")
	client, sent := d.idemClient("b", customer, true)
	defer client.CloseIdleConnections()
	resp, err := client.Post(d.url+"/payments", "application/json", strings.NewReader(payment(customer, 1999)))
	if err != nil {
		return "", fmt.Errorf("(b): %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return "", fmt.Errorf("(b) reading the response: %w", err)
	}
	attempt, _ := idem.AttemptFromContext(resp.Request.Context())
	key := attempt.Key
	d.t.line("b", sent.attempt(resp), statusText(resp, body), shortKey(key), replayedText(resp), d.srv.Payments(customer))
	if err := d.gw.await(sent.count(), settleWithin); err != nil {
		return "", err
	}
	return key, nil
}

// reuse is story (c): the key of (b) sent again, each time as a new
// operation of its own: with the same body it gets the recorded answer again
// (a replay), with another amount it is refused.
func (d *demo) reuse(key string) error {
	d.t.header("(c) the same key again: the same payment, then another amount")
	for _, amount := range []int{1999, 2999} {
		if err := d.again(key, amount); err != nil {
			return err
		}
	}
	return nil
}

// again sends one payment of cus_bob under key, with a client of its own.
func (d *demo) again(key string, amount int) error {
	const customer = "cus_bob"
	client, sent := d.idemClient("c", customer, false)
	defer client.CloseIdleConnections()
	ctx := idem.ContextWithKey(context.Background(), key)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/payments",
		strings.NewReader(payment(customer, amount)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("(c): %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("(c) reading the response: %w", err)
	}
	d.t.line("c", sent.attempt(resp), statusText(resp, body), shortKey(key), replayedText(resp), d.srv.Payments(customer))
	return d.gw.await(sent.count(), settleWithin)
}
