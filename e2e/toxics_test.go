package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/idemtest"
)

// newServer starts the companion server for a proxy test. A duplicate that
// arrives while the first request still runs waits for it and gets the replay
// (instead of a 409 whose Retry-After is the 30 s lease), so the outcome does
// not depend on how fast a loaded machine runs the first request.
func newServer(t *testing.T) *idemtest.Server {
	t.Helper()
	srv := idemtest.NewServer(idemtest.WithMiddlewareOptions(server.WithInProgressWait(5 * time.Second)))
	t.Cleanup(srv.Close)
	return srv
}

// newClient returns an idem client that records its retries in rec.
func newClient(rec *retries, opts ...idem.Option) *http.Client {
	opts = append([]idem.Option{
		idem.WithMaxAttempts(4),
		idem.WithBackoff(10*time.Millisecond, 100*time.Millisecond),
		idem.WithAttemptTimeout(2 * time.Second),
		idem.WithMaxElapsed(10 * time.Second),
		idem.WithOnRetry(rec.onRetry),
	}, opts...)
	return &http.Client{Transport: idem.NewTransport(baseTransport(), opts...)}
}

// TestTransientFaults sends one payment through a proxy whose fault hits the
// first connection only: the client's first retry heals the network (removes
// the toxic). Each case checks that the client retried once, with the same
// key, for the expected reason, and that the customer was charged exactly
// once: a retry of a request the server had executed gets the replay.
func TestTransientFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		toxic        toxic
		opts         []idem.Option
		reason       string
		wantReplayed bool // the server executed the first attempt
		// The first attempt, keyed, goes on past its time-out: its own 201
		// (once the toxic is gone) or the retry's replay may come first.
		eitherAnswer bool
	}{
		{
			name:         "latency past the attempt timeout",
			toxic:        toxic{Type: "latency", Stream: "downstream", Attributes: map[string]any{"latency": 5000}},
			opts:         []idem.Option{idem.WithAttemptTimeout(300 * time.Millisecond)},
			reason:       "attempt-timeout",
			eitherAnswer: true,
		},
		{
			// The request is swallowed: the server never sees it, and the
			// connection stays open until the client gives up on it.
			name:         "request swallowed (timeout toxic)",
			toxic:        toxic{Type: "timeout", Stream: "upstream", Attributes: map[string]any{"timeout": 0}},
			opts:         []idem.Option{idem.WithAttemptTimeout(300 * time.Millisecond)},
			reason:       "attempt-timeout",
			wantReplayed: false,
		},
		{
			name:         "connection reset before the request reaches the server",
			toxic:        toxic{Type: "reset_peer", Stream: "upstream", Attributes: map[string]any{"timeout": 0}},
			reason:       "network",
			wantReplayed: false,
		},
		{
			name:         "connection reset when the response comes back",
			toxic:        toxic{Type: "reset_peer", Stream: "downstream", Attributes: map[string]any{"timeout": 0}},
			reason:       "network",
			wantReplayed: true,
		},
		{
			name:         "response cut in its headers (limit_data)",
			toxic:        toxic{Type: "limit_data", Stream: "downstream", Attributes: map[string]any{"bytes": 12}},
			reason:       "network",
			wantReplayed: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t)
			px := newProxy(t, srv.URL)
			tt.toxic.Name = "fault"
			px.add(t, tt.toxic)
			rec := &retries{}
			rec.hook = sync.OnceFunc(func() {
				if err := px.remove("fault"); err != nil {
					t.Errorf("healing: %v", err)
				}
			})
			client := newClient(rec, tt.opts...)
			const customer = "cus_transient"

			r, err := postPayment(context.Background(), client, px.URL, customer)
			if err != nil {
				t.Fatalf("payment: %v", err)
			}
			if r.status != http.StatusCreated || r.bodyErr != nil || (r.replayed != tt.wantReplayed && !tt.eitherAnswer) {
				t.Errorf("payment = %d (body error %v), replayed %t; want 201, replayed %t", r.status, r.bodyErr, r.replayed, tt.wantReplayed)
			}
			evs := rec.all()
			if len(evs) != 1 {
				t.Fatalf("%d retries, want 1: %+v", len(evs), evs)
			}
			if ev := evs[0]; ev.Reason != tt.reason || ev.Key != r.key || ev.Key == "" {
				t.Errorf("retry: reason %v, key %q (err %v); want %v with the operation's key %q", ev.Reason, ev.Key, ev.Err, tt.reason, r.key)
			}
			if n := srv.Payments(customer); n != 1 {
				t.Errorf("%d payments after 2 attempts, want exactly 1", n)
			}
		})
	}
}

// countingConn counts the bytes read from a connection.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// measure sends one payment for customer to url with a plain client and
// returns how many bytes its response took on the wire, in all and in its
// body.
func measure(t *testing.T, url, customer string) (total, body int) {
	t.Helper()
	var n atomic.Int64
	tr := baseTransport()
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, n: &n}, nil
	}
	ctx := idem.ContextWithKey(context.Background(), "measure-"+customer) // a plain client ignores it
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/payments", strings.NewReader(paymentBody(customer)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "measure-"+customer)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("measuring: %d %v", resp.StatusCode, err)
	}
	return int(n.Load()), len(b)
}

// TestResponseCutMidBody: the connection is cut in the middle of the 201's
// body. The client hands the response over (its headers were whole), but
// reading the body fails with io.ErrUnexpectedEOF: a cut body never reads as a
// short success. The caller runs the operation again with its key and gets the
// whole response, replayed: one payment.
func TestResponseCutMidBody(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	px := newProxy(t, srv.URL)
	const customer = "cus_midbody01"
	total, bodyLen := measure(t, px.URL, "cus_measure01") // same length: same response size
	cutAt := total - bodyLen + bodyLen/2
	px.add(t, toxic{Name: "cut", Type: "limit_data", Stream: "downstream", Attributes: map[string]any{"bytes": cutAt}})
	rec := &retries{}
	client := newClient(rec)

	r, err := postPayment(context.Background(), client, px.URL, customer)
	if err != nil {
		t.Fatalf("payment: %v", err)
	}
	if r.status != http.StatusCreated || !errors.Is(r.bodyErr, io.ErrUnexpectedEOF) || len(r.body) >= bodyLen {
		t.Fatalf("cut response: status %d, %d of %d body bytes, error %v; want 201 and io.ErrUnexpectedEOF",
			r.status, len(r.body), bodyLen, r.bodyErr)
	}
	if n := srv.Payments(customer); n != 1 {
		t.Fatalf("%d payments after the cut response, want 1", n)
	}
	if err := px.remove("cut"); err != nil {
		t.Fatal(err)
	}

	again, err := postPayment(idem.ContextWithKey(context.Background(), r.key), client, px.URL, customer)
	if err != nil {
		t.Fatalf("running the payment again: %v", err)
	}
	var p struct {
		ID string `json:"id"`
	}
	if again.status != http.StatusCreated || !again.replayed || again.bodyErr != nil || json.Unmarshal(again.body, &p) != nil {
		t.Fatalf("again = %d, replayed %t, body %q (%v); want the whole 201, replayed", again.status, again.replayed, again.body, again.bodyErr)
	}
	ledger := srv.Ledger().Count(customer)
	payments, _ := srv.Ledger().List(context.Background(), customer)
	if ledger != 1 || payments[0].ID != p.ID {
		t.Errorf("ledger: %d payments %+v; want one, %s", ledger, payments, p.ID)
	}
	if evs := rec.all(); len(evs) != 0 {
		t.Errorf("the client retried %d times, want 0: each operation took one attempt", len(evs))
	}
}

// TestBandwidthLimit: both directions limited to 1 KB/s. The payment is slow
// (a few hundred milliseconds) but completes in one attempt, within its cap.
func TestBandwidthLimit(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	px := newProxy(t, srv.URL)
	px.add(t, toxic{Name: "in", Type: "bandwidth", Stream: "upstream", Attributes: map[string]any{"rate": 1}})
	px.add(t, toxic{Name: "out", Type: "bandwidth", Stream: "downstream", Attributes: map[string]any{"rate": 1}})
	rec := &retries{}
	client := newClient(rec, idem.WithAttemptTimeout(5*time.Second))
	const customer = "cus_bandwidth"

	start := time.Now()
	r, err := postPayment(context.Background(), client, px.URL, customer)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("payment: %v", err)
	}
	if r.status != http.StatusCreated || r.replayed || r.bodyErr != nil {
		t.Errorf("payment = %d, replayed %t, body error %v; want a whole 201", r.status, r.replayed, r.bodyErr)
	}
	if evs := rec.all(); len(evs) != 0 {
		t.Errorf("%d retries, want none: a slow link is not a failure", len(evs))
	}
	if n := srv.Payments(customer); n != 1 {
		t.Errorf("%d payments, want 1", n)
	}
	// A lower bound only: it proves the limit was on the path.
	if elapsed < 400*time.Millisecond {
		t.Errorf("payment took %v through a 1 KB/s link; the limit was not applied", elapsed)
	}
	t.Logf("payment took %v at 1 KB/s", elapsed)
}
