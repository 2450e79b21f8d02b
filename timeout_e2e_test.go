package idem_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/server/idemtest"
)

// TestTimedOutPaymentLearnsItsOutcome is issue 8's scenario over idem's own
// server (in-process, memory store): the first attempt is written but answers
// late (1.2 s, past the 300 ms attempt time-out); the retries meet the key in
// progress. The caller must end with the payment's 201 within about a second
// of the answer, not a 409 or an "attempts exhausted", and exactly one
// payment is made.
func TestTimedOutPaymentLearnsItsOutcome(t *testing.T) {
	t.Parallel()
	srv := idemtest.NewServer()
	defer srv.Close()
	tr := idem.NewTransport(srv.Client().Transport,
		idem.WithAttemptTimeout(300*time.Millisecond), idem.WithMaxElapsed(5*time.Second))
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/payments",
		strings.NewReader(`{"customer":"cus_late","amount":1999,"currency":"EUR"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Chaos-Delay-After-Write", "1200ms")
	start := time.Now()
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	elapsed := time.Since(start)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	// The first attempt went on past its time-out (see late.go): the answer is
	// its own 201 when it comes first, or its replay to a poll.
	t.Logf("201 after %v (replayed: %v)", elapsed, idem.Replayed(resp))
	assert.Less(t, elapsed, 1200*time.Millisecond+1500*time.Millisecond, "within about a second of the late answer")
	assert.Equal(t, 1, srv.Payments("cus_late"))
}
