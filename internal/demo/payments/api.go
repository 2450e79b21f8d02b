package payments

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/idemkit/idem/internal/demo/cause"
	"github.com/idemkit/idem/internal/problem"
	"github.com/idemkit/idem/server"
)

// Limits of the payments API's input.
const (
	MaxBodyBytes   = 64 << 10
	MaxCustomerLen = 64
	MaxAmount      = 100_000_000_00 // minor units
)

// Problem type URIs of the payments API itself.
const (
	ProblemBadJSON      = server.ProblemBase + "payments-bad-json"
	ProblemInvalidValue = server.ProblemBase + "payments-invalid-value"
	ProblemLedger       = server.ProblemBase + "payments-ledger-failed"
	ProblemLedgerFull   = server.ProblemBase + "payments-ledger-full"
)

// errNoOwner is what the Owner hook may return for a caller it cannot place.
var errNoOwner = errors.New("payments: the caller has no scope")

// API serves the payments endpoints. The zero value is not usable: Ledger is required.
type API struct {
	Ledger Ledger
	// BeforeWrite, if set, runs after validation and before the business write;
	// a non-nil error answers 503 with no write (fault injection uses it).
	BeforeWrite func(r *http.Request) error
	// AfterWrite, if set, runs after the business write, before the response is
	// written (fault injection uses it to crash or fail in the window).
	AfterWrite func(r *http.Request)
	// Owner returns the scope of the request's caller, the one the
	// idempotency middleware keys its records by (server.BearerScope): each
	// payment is stored with it, and List shows a caller its own payments
	// only. An error answers 401. nil: one owner for everyone.
	Owner func(r *http.Request) (string, error)
	// NewID returns a payment id; default a random UUID.
	NewID func() string
	// Now returns the creation time; default time.Now.
	Now func() time.Time
}

// CreateRequest is the body of POST /payments.
type CreateRequest struct {
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// ListResponse is the body of GET /payments.
type ListResponse struct {
	// Count is how many payments match, in all pages.
	Count int `json:"count"`
	// Payments is this page.
	Payments []Payment `json:"payments"`
	// Next is the cursor of the next page (?after=Next), empty on the last.
	Next string `json:"next,omitempty"`
}

// Create handles POST /payments: {"customer","amount","currency"} -> 201 with the payment.
func (a *API) Create(w http.ResponseWriter, r *http.Request) {
	var in CreateRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		if isTooLarge(err) {
			writeTooLarge(w)
			return
		}
		writeBadJSON(w, err.Error())
		return
	}
	// The rest of the body must be whitespace; reading it may also be what
	// takes the body past the limit, which is a 413 like any other.
	if _, err := dec.Token(); err != io.EOF {
		if isTooLarge(err) {
			writeTooLarge(w)
			return
		}
		writeBadJSON(w, "trailing data after the JSON object")
		return
	}
	if detail := in.validate(); detail != "" {
		problem.Write(w, problem.Details{Type: ProblemInvalidValue, Title: "Invalid payment",
			Status: http.StatusUnprocessableEntity, Detail: detail})
		return
	}
	if a.BeforeWrite != nil {
		if err := a.BeforeWrite(r); err != nil {
			cause.Report(r.Context(), err)
			problem.Write(w, problem.Details{Type: ProblemLedger, Title: "Payment not taken",
				Status: http.StatusServiceUnavailable, Detail: err.Error(), RetryAfter: time.Second})
			return
		}
	}
	owner, err := a.owner(r)
	if err != nil {
		writeUnauthenticated(w)
		return
	}
	p := Payment{ID: a.newID(), Customer: in.Customer, Amount: in.Amount, Currency: in.Currency, Created: a.now().UTC(),
		Owner: owner}
	if err := a.Ledger.Insert(r.Context(), p); err != nil {
		cause.Report(r.Context(), err)
		if errors.Is(err, ErrLedgerFull) {
			problem.Write(w, problem.Details{Type: ProblemLedgerFull, Title: "Ledger full",
				Status: http.StatusInsufficientStorage, Detail: "the demo's ledger holds as many payments as it may, in all or for this caller"})
			return
		}
		problem.Write(w, problem.Details{Type: ProblemLedger, Title: "Payment not taken",
			Status: http.StatusServiceUnavailable, Detail: "the ledger could not record the payment", RetryAfter: time.Second})
		return
	}
	if a.AfterWrite != nil {
		a.AfterWrite(r)
	}
	body, _ := json.Marshal(p) // a Payment always marshals
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/"+p.ID)
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(append(body, '\n'))
}

// Paging of GET /payments.
const (
	// DefaultPageSize is how many payments a page holds without ?limit.
	DefaultPageSize = 100
	// MaxPageSize is the largest ?limit accepted.
	MaxPageSize = 1000
)

// List handles GET /payments?customer=C&limit=N&after=CURSOR ->
// {"count":T,"payments":[...],"next":CURSOR}: the caller's payments (see
// Owner) of C (all of the caller's when C is empty), oldest first, one page
// at a time: at most N (1 to MaxPageSize, default DefaultPageSize) after the
// payment CURSOR names (from the first when absent). count is how many such
// payments the caller has in all; next, present when more follow, is the
// cursor of the next page. A limit or cursor it cannot read is answered 422.
func (a *API) List(w http.ResponseWriter, r *http.Request) {
	owner, err := a.owner(r)
	if err != nil {
		writeUnauthenticated(w)
		return
	}
	q, detail := pageQuery(r.URL.Query())
	if detail != "" {
		problem.Write(w, problem.Details{Type: ProblemInvalidValue, Title: "Invalid page",
			Status: http.StatusUnprocessableEntity, Detail: detail})
		return
	}
	q.Owner = owner
	pg, err := a.Ledger.Page(r.Context(), q)
	if err != nil {
		cause.Report(r.Context(), err)
		problem.Write(w, problem.Details{Type: ProblemLedger, Title: "Ledger unavailable",
			Status: http.StatusServiceUnavailable, Detail: "the ledger could not be read", RetryAfter: time.Second})
		return
	}
	out := ListResponse{Count: pg.Total, Payments: pg.Payments}
	if out.Payments == nil {
		out.Payments = []Payment{}
	}
	if pg.More && len(pg.Payments) > 0 {
		out.Next = strconv.FormatInt(pg.Payments[len(pg.Payments)-1].Seq, 10)
	}
	body, _ := json.Marshal(out)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(body, '\n'))
}

// pageQuery reads customer, limit and after; detail says what is wrong.
func pageQuery(v url.Values) (q Query, detail string) {
	q = Query{Customer: v.Get("customer"), Limit: DefaultPageSize}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageSize {
			return Query{}, fmt.Sprintf(`"limit" must be a whole number from 1 to %d`, MaxPageSize)
		}
		q.Limit = n
	}
	if s := v.Get("after"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return Query{}, `"after" must be the "next" cursor of an earlier page`
		}
		q.After = n
	}
	return q, ""
}

func (in CreateRequest) validate() string {
	switch {
	case in.Customer == "":
		return `"customer" is required`
	case len(in.Customer) > MaxCustomerLen:
		return fmt.Sprintf(`"customer" is longer than %d bytes`, MaxCustomerLen)
	case in.Amount <= 0:
		return `"amount" must be a positive integer (minor units)`
	case in.Amount > MaxAmount:
		return fmt.Sprintf(`"amount" must be at most %d`, MaxAmount)
	case !isCurrency(in.Currency):
		return `"currency" must be three upper-case letters (ISO 4217), e.g. "EUR"`
	}
	return ""
}

func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

func isTooLarge(err error) bool {
	var tooBig *http.MaxBytesError
	return errors.As(err, &tooBig)
}

func writeTooLarge(w http.ResponseWriter) {
	problem.Write(w, problem.Details{Type: server.ProblemBodyTooLarge, Title: "Request body too large",
		Status: http.StatusRequestEntityTooLarge, Detail: fmt.Sprintf("the body exceeds %d bytes", MaxBodyBytes)})
}

func writeBadJSON(w http.ResponseWriter, detail string) {
	problem.Write(w, problem.Details{Type: ProblemBadJSON, Title: "Malformed JSON body",
		Status: http.StatusBadRequest, Detail: detail})
}

func writeUnauthenticated(w http.ResponseWriter) {
	problem.Write(w, problem.Details{Type: server.ProblemUnauthenticated, Title: "No usable credentials",
		Status: http.StatusUnauthorized, Detail: "send Authorization: Bearer <token>"})
}

func (a *API) owner(r *http.Request) (string, error) {
	if a.Owner == nil {
		return "", nil
	}
	owner, err := a.Owner(r)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errNoOwner, err)
	}
	return owner, nil
}

func (a *API) newID() string {
	if a.NewID != nil {
		return a.NewID()
	}
	return "pay_" + uuid.NewString()
}

func (a *API) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}
