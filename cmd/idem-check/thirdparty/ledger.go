package thirdparty

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxSlow bounds the handler's Slow header.
const MaxSlow = 10 * time.Second

// The payments handler every implementation here wraps, whatever its
// framework:
//
//	POST /payments {"customer","amount","currency"} answers 201 with
//	{"id","customer","amount","currency"}, a Location and a session cookie,
//	for the caller of the bearer token (none: 401);
//	GET /payments?customer=C answers {"count":N} of the caller's payments.
//
// The request header Slow: 2s makes the handler slow (at most MaxSlow);
// Fail: 1 makes it answer 500 through the framework's error path.
type ledger struct {
	mu     sync.Mutex
	seq    int
	counts map[string]int // by caller and customer
}

func newLedger() *ledger { return &ledger{counts: map[string]int{}} }

// errPayment is a request the handler refuses (400).
var errPayment = errors.New("want {customer, amount > 0, currency}")

// caller is the bearer token of an Authorization header.
func caller(authorization string) (string, bool) {
	token, ok := strings.CutPrefix(authorization, "Bearer ")
	return token, ok && token != ""
}

type payment struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// parsePayment reads a payment request's body.
func parsePayment(body []byte) (payment, error) {
	var p payment
	if err := json.Unmarshal(body, &p); err != nil || p.Customer == "" || p.Amount <= 0 || p.Currency == "" {
		return p, errPayment
	}
	return p, nil
}

// slow parses the Slow header: how long the handler sleeps.
func slow(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > MaxSlow {
		return 0, errors.New("Slow: want a duration up to " + MaxSlow.String())
	}
	return d, nil
}

// pay records the payment for who and gives it an id.
func (l *ledger) pay(who string, p payment) payment {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	p.ID = "pay_" + strconv.Itoa(l.seq)
	l.counts[who+"\x00"+p.Customer]++
	return p
}

func (l *ledger) count(who, customer string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[who+"\x00"+customer]
}
