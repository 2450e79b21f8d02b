package payments

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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
	Count    int       `json:"count"`
	Payments []Payment `json:"payments"`
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

// List handles GET /payments?customer=C -> {"count":N,"payments":[...]}: the
// payments of C (all when C is empty) that the caller made (see Owner).
func (a *API) List(w http.ResponseWriter, r *http.Request) {
	owner, err := a.owner(r)
	if err != nil {
		writeUnauthenticated(w)
		return
	}
	all, err := a.Ledger.List(r.Context(), r.URL.Query().Get("customer"))
	if err != nil {
		cause.Report(r.Context(), err)
		problem.Write(w, problem.Details{Type: ProblemLedger, Title: "Ledger unavailable",
			Status: http.StatusServiceUnavailable, Detail: "the ledger could not be read", RetryAfter: time.Second})
		return
	}
	ps := []Payment{}
	for _, p := range all {
		if p.Owner == owner {
			ps = append(ps, p)
		}
	}
	body, _ := json.Marshal(ListResponse{Count: len(ps), Payments: ps})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(body, '\n'))
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
