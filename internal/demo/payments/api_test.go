package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

var errLedgerDown = errors.New("ledger down")

// fakeLedger wraps a MemLedger and fails on demand.
type fakeLedger struct {
	MemLedger
	insertErr, listErr error
	nilList            bool // Page returns a nil slice
}

func (l *fakeLedger) Insert(ctx context.Context, p Payment) error {
	if l.insertErr != nil {
		return l.insertErr
	}
	return l.MemLedger.Insert(ctx, p)
}

func (l *fakeLedger) Page(ctx context.Context, q Query) (Page, error) {
	if l.listErr != nil {
		return Page{}, l.listErr
	}
	if l.nilList {
		return Page{}, nil
	}
	return l.MemLedger.Page(ctx, q)
}

var created = time.Date(2025, 3, 4, 5, 6, 7, 8, time.FixedZone("X", 3600))

// newAPI returns an API over a fake ledger with numbered ids and a fixed clock.
func newAPI() (*API, *fakeLedger) {
	l := &fakeLedger{}
	n := 0
	var mu sync.Mutex
	return &API{
		Ledger: l,
		NewID: func() string {
			mu.Lock()
			defer mu.Unlock()
			n++
			return fmt.Sprintf("pay_%d", n)
		},
		Now: func() time.Time { return created },
	}, l
}

func create(a *API, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	a.Create(rec, httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body)))
	return rec
}

func list(a *API, target string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	a.List(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return rec
}

// checkProblem asserts an RFC 9457 answer with status and type.
func checkProblem(t *testing.T, rec *httptest.ResponseRecorder, status int, typ string) server.Problem {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status = %d, want %d (body %s)", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	var p server.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", rec.Body, err)
	}
	if p.Type != typ || p.Status != status {
		t.Errorf("problem = %+v, want type %s, status %d", p, typ, status)
	}
	return p
}

func TestCreate(t *testing.T) {
	t.Parallel()
	a, l := newAPI()
	rec := create(a, `{"customer":"ada","amount":1000,"currency":"EUR"}`)
	if rec.Code != http.StatusCreated {
		t.Fatalf("status = %d, want 201 (body %s)", rec.Code, rec.Body)
	}
	if got := rec.Header().Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q", got)
	}
	if got := rec.Header().Get("Location"); got != "/payments/pay_1" {
		t.Errorf("Location = %q, want /payments/pay_1", got)
	}
	want := `{"id":"pay_1","customer":"ada","amount":1000,"currency":"EUR","created":"2025-03-04T04:06:07.000000008Z"}` + "\n"
	if rec.Body.String() != want {
		t.Errorf("body = %s, want %s", rec.Body, want)
	}
	ps, _ := l.List(context.Background(), "")
	if len(ps) != 1 || ps[0] != (Payment{ID: "pay_1", Customer: "ada", Amount: 1000, Currency: "EUR", Created: created.UTC(), Seq: 1}) {
		t.Errorf("ledger = %+v", ps)
	}
}

// TestCreateRejects covers every input that must be refused before the
// business write: nothing reaches the ledger.
func TestCreateRejects(t *testing.T) {
	t.Parallel()
	valid := func(customer string, amount int64, currency string) string {
		b, _ := json.Marshal(CreateRequest{Customer: customer, Amount: amount, Currency: currency})
		return string(b)
	}
	tooLong := strings.Repeat("c", MaxCustomerLen+1)
	tests := []struct {
		name   string
		body   string
		status int
		typ    string
	}{
		{"missing customer", `{"amount":1,"currency":"EUR"}`, 422, ProblemInvalidValue},
		{"empty customer", valid("", 1, "EUR"), 422, ProblemInvalidValue},
		{"customer too long", valid(tooLong, 1, "EUR"), 422, ProblemInvalidValue},
		{"amount missing", `{"customer":"ada","currency":"EUR"}`, 422, ProblemInvalidValue},
		{"amount zero", valid("ada", 0, "EUR"), 422, ProblemInvalidValue},
		{"amount negative", valid("ada", -1, "EUR"), 422, ProblemInvalidValue},
		{"amount over max", valid("ada", MaxAmount+1, "EUR"), 422, ProblemInvalidValue},
		{"currency missing", `{"customer":"ada","amount":1}`, 422, ProblemInvalidValue},
		{"currency lower case", valid("ada", 1, "eur"), 422, ProblemInvalidValue},
		{"currency two letters", valid("ada", 1, "EU"), 422, ProblemInvalidValue},
		{"currency four letters", valid("ada", 1, "EURO"), 422, ProblemInvalidValue},
		{"currency with digit", valid("ada", 1, "E1R"), 422, ProblemInvalidValue},
		{"currency non-ASCII", valid("ada", 1, "ÉUR"), 422, ProblemInvalidValue},
		{"null", `null`, 422, ProblemInvalidValue},

		{"empty body", ``, 400, ProblemBadJSON},
		{"not JSON", `customer=ada`, 400, ProblemBadJSON},
		{"truncated", `{"customer":"ada","amount":1`, 400, ProblemBadJSON},
		{"array", `[]`, 400, ProblemBadJSON},
		{"string", `"ada"`, 400, ProblemBadJSON},
		{"amount as string", `{"customer":"ada","amount":"1","currency":"EUR"}`, 400, ProblemBadJSON},
		{"amount fractional", `{"customer":"ada","amount":1.5,"currency":"EUR"}`, 400, ProblemBadJSON},
		{"amount overflows int64", `{"customer":"ada","amount":1e30,"currency":"EUR"}`, 400, ProblemBadJSON},
		{"unknown field", `{"customer":"ada","amount":1,"currency":"EUR","note":"x"}`, 400, ProblemBadJSON},
		{"second object", valid("ada", 1, "EUR") + valid("bob", 2, "EUR"), 400, ProblemBadJSON},
		{"trailing garbage", valid("ada", 1, "EUR") + ` x`, 400, ProblemBadJSON},
		{"trailing number", valid("ada", 1, "EUR") + ` 1`, 400, ProblemBadJSON},
		{"trailing close brace", valid("ada", 1, "EUR") + `}`, 400, ProblemBadJSON},

		{"body over the limit", valid(strings.Repeat("c", MaxBodyBytes), 1, "EUR"), 413, server.ProblemBodyTooLarge},
		{"padding past the limit", valid("ada", 1, "EUR") + strings.Repeat(" ", MaxBodyBytes), 413, server.ProblemBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, l := newAPI()
			a.BeforeWrite = func(*http.Request) error { t.Error("BeforeWrite called for a refused request"); return nil }
			checkProblem(t, create(a, tt.body), tt.status, tt.typ)
			if n := l.Count(""); n != 0 {
				t.Errorf("ledger holds %d payments, want none", n)
			}
		})
	}
}

func TestCreateAccepts(t *testing.T) {
	t.Parallel()
	atMax := strings.Repeat("c", MaxCustomerLen)
	tests := []struct{ name, body string }{
		{"customer at max length", `{"customer":"` + atMax + `","amount":1,"currency":"EUR"}`},
		{"amount at max", fmt.Sprintf(`{"customer":"ada","amount":%d,"currency":"USD"}`, MaxAmount)},
		{"amount one", `{"customer":"ada","amount":1,"currency":"JPY"}`},
		{"trailing whitespace", `{"customer":"ada","amount":1,"currency":"EUR"}` + " \n\t\r\n"},
		{"whitespace and any key order", ` { "currency" : "EUR", "amount" : 7, "customer" : "ada" } `},
		{"body exactly at the limit", padTo(`{"customer":"ada","amount":1,"currency":"EUR"}`, MaxBodyBytes)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, l := newAPI()
			if rec := create(a, tt.body); rec.Code != http.StatusCreated {
				t.Fatalf("status = %d, want 201 (body %s)", rec.Code, rec.Body)
			}
			if n := l.Count(""); n != 1 {
				t.Errorf("ledger holds %d payments, want 1", n)
			}
		})
	}
}

// padTo pads a JSON body with trailing spaces to exactly n bytes.
func padTo(body string, n int) string {
	return body + strings.Repeat(" ", n-len(body))
}

// writeLog is a ResponseWriter that notes when the response was started, so
// a hook can tell whether it runs before the write.
type writeLog struct {
	*httptest.ResponseRecorder
	started bool
}

func (w *writeLog) WriteHeader(code int) {
	w.started = true
	w.ResponseRecorder.WriteHeader(code)
}

func (w *writeLog) Write(p []byte) (int, error) {
	w.started = true
	return w.ResponseRecorder.Write(p)
}

func TestCreateHooks(t *testing.T) {
	t.Parallel()
	body := `{"customer":"ada","amount":1000,"currency":"EUR"}`

	t.Run("BeforeWrite error answers 503 and writes nothing", func(t *testing.T) {
		t.Parallel()
		a, l := newAPI()
		var seen *http.Request
		a.BeforeWrite = func(r *http.Request) error { seen = r; return errors.New("injected") }
		a.AfterWrite = func(*http.Request) { t.Error("AfterWrite called after a refused write") }
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
		rec := httptest.NewRecorder()
		a.Create(rec, r)
		checkProblem(t, rec, http.StatusServiceUnavailable, ProblemLedger)
		if got := rec.Header().Get("Retry-After"); got != "1" {
			t.Errorf("Retry-After = %q, want 1", got)
		}
		if seen != r {
			t.Errorf("BeforeWrite did not get the request")
		}
		if n := l.Count(""); n != 0 {
			t.Errorf("ledger holds %d payments, want none", n)
		}
	})

	t.Run("BeforeWrite nil lets the write happen", func(t *testing.T) {
		t.Parallel()
		a, l := newAPI()
		calls := 0
		a.BeforeWrite = func(*http.Request) error {
			calls++
			if n := l.Count(""); n != 0 {
				t.Errorf("BeforeWrite ran after the write (%d payments)", n)
			}
			return nil
		}
		if rec := create(a, body); rec.Code != http.StatusCreated {
			t.Fatalf("status = %d", rec.Code)
		}
		if calls != 1 || l.Count("") != 1 {
			t.Errorf("BeforeWrite calls = %d, payments = %d; want 1, 1", calls, l.Count(""))
		}
	})

	t.Run("AfterWrite runs after the write, before the response", func(t *testing.T) {
		t.Parallel()
		a, l := newAPI()
		w := &writeLog{ResponseRecorder: httptest.NewRecorder()}
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
		calls := 0
		a.AfterWrite = func(got *http.Request) {
			calls++
			if got != r {
				t.Errorf("AfterWrite did not get the request")
			}
			if n := l.Count("ada"); n != 1 {
				t.Errorf("AfterWrite ran before the write (%d payments)", n)
			}
			if w.started {
				t.Errorf("AfterWrite ran after the response was started")
			}
		}
		a.Create(w, r)
		if w.Code != http.StatusCreated || calls != 1 {
			t.Errorf("status = %d, AfterWrite calls = %d; want 201, 1", w.Code, calls)
		}
	})

	t.Run("ledger error answers 503", func(t *testing.T) {
		t.Parallel()
		a, l := newAPI()
		l.insertErr = errLedgerDown
		a.AfterWrite = func(*http.Request) { t.Error("AfterWrite called after a failed write") }
		rec := create(a, body)
		p := checkProblem(t, rec, http.StatusServiceUnavailable, ProblemLedger)
		if got := rec.Header().Get("Retry-After"); got != "1" {
			t.Errorf("Retry-After = %q, want 1", got)
		}
		if strings.Contains(p.Detail, errLedgerDown.Error()) {
			t.Errorf("detail %q leaks the ledger's error", p.Detail)
		}
	})
}

func TestCreateDefaultIDsAreUnique(t *testing.T) {
	t.Parallel()
	l := NewMemLedger()
	a := &API{Ledger: l}
	const n = 200
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rec := create(a, `{"customer":"ada","amount":5,"currency":"EUR"}`); rec.Code != http.StatusCreated {
				t.Errorf("status = %d", rec.Code)
			}
		}()
	}
	wg.Wait()
	ps, _ := l.List(context.Background(), "")
	if len(ps) != n {
		t.Fatalf("ledger holds %d payments, want %d", len(ps), n)
	}
	seen := make(map[string]bool, n)
	for _, p := range ps {
		if !strings.HasPrefix(p.ID, "pay_") || len(p.ID) != len("pay_")+36 {
			t.Errorf("id %q is not pay_ and a UUID", p.ID)
		}
		if seen[p.ID] {
			t.Errorf("id %q given twice", p.ID)
		}
		seen[p.ID] = true
		if p.Created.Location() != time.UTC || p.Created.IsZero() {
			t.Errorf("created = %v, want a UTC time", p.Created)
		}
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	a, _ := newAPI()
	for _, b := range []string{
		`{"customer":"ada","amount":1,"currency":"EUR"}`,
		`{"customer":"bob","amount":2,"currency":"EUR"}`,
		`{"customer":"ada","amount":3,"currency":"USD"}`,
	} {
		if rec := create(a, b); rec.Code != http.StatusCreated {
			t.Fatalf("create: %d", rec.Code)
		}
	}
	tests := []struct {
		target  string
		wantIDs []string
	}{
		{"/payments", []string{"pay_1", "pay_2", "pay_3"}},
		{"/payments?customer=", []string{"pay_1", "pay_2", "pay_3"}},
		{"/payments?customer=ada", []string{"pay_1", "pay_3"}},
		{"/payments?customer=bob", []string{"pay_2"}},
		{"/payments?customer=eve", nil},
		{"/payments?customer=Ada", nil}, // customers are compared exactly
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			t.Parallel()
			rec := list(a, tt.target)
			if rec.Code != http.StatusOK {
				t.Fatalf("status = %d", rec.Code)
			}
			if rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("Cache-Control") != "no-store" {
				t.Errorf("headers = %v", rec.Header())
			}
			var got ListResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, p := range got.Payments {
				ids = append(ids, p.ID)
			}
			if got.Count != len(tt.wantIDs) || strings.Join(ids, ",") != strings.Join(tt.wantIDs, ",") {
				t.Errorf("list = count %d ids %v, want %v", got.Count, ids, tt.wantIDs)
			}
		})
	}
}

func TestListEmpty(t *testing.T) {
	t.Parallel()
	const want = `{"count":0,"payments":[]}` + "\n"
	for _, nilList := range []bool{false, true} {
		t.Run(fmt.Sprint("nil slice from the ledger=", nilList), func(t *testing.T) {
			t.Parallel()
			a, l := newAPI()
			l.nilList = nilList
			if rec := list(a, "/payments?customer=ada"); rec.Code != http.StatusOK || rec.Body.String() != want {
				t.Errorf("got %d %s, want 200 %s", rec.Code, rec.Body, want)
			}
		})
	}
}

func TestListLedgerError(t *testing.T) {
	t.Parallel()
	a, l := newAPI()
	l.listErr = errLedgerDown
	rec := list(a, "/payments")
	checkProblem(t, rec, http.StatusServiceUnavailable, ProblemLedger)
	if got := rec.Header().Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1", got)
	}
}

func TestMemLedgerListIsACopy(t *testing.T) {
	t.Parallel()
	l := NewMemLedger()
	ctx := context.Background()
	_ = l.Insert(ctx, Payment{ID: "p1", Customer: "ada"})
	_ = l.Insert(ctx, Payment{ID: "p2", Customer: "bob"})
	ps, _ := l.List(ctx, "")
	ps[0].ID = "changed"
	again, _ := l.List(ctx, "")
	if again[0].ID != "p1" {
		t.Errorf("List returned the ledger's own slice: %+v", again)
	}
	if l.Count("ada") != 1 || l.Count("") != 2 || l.Count("eve") != 0 {
		t.Errorf("Count = %d %d %d, want 1 2 0", l.Count("ada"), l.Count(""), l.Count("eve"))
	}
}

// TestCreateBehindMiddleware runs the API behind the middleware, as its users
// do: a retry of a created payment is replayed byte for byte and the ledger
// holds one payment; a refused body is not recorded, so its retry runs again.
func TestCreateBehindMiddleware(t *testing.T) {
	t.Parallel()
	a, l := newAPI()
	h := server.Middleware(memstore.New())(http.HandlerFunc(a.Create))
	send := func(key, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
		r.Header.Set(server.HeaderKey, key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	body := `{"customer":"ada","amount":1000,"currency":"EUR"}`
	first, retry := send("k1", body), send("k1", body)
	if first.Code != http.StatusCreated || retry.Code != http.StatusCreated || first.Body.String() != retry.Body.String() {
		t.Fatalf("first %d %s, retry %d %s", first.Code, first.Body, retry.Code, retry.Body)
	}
	if retry.Header().Get(server.HeaderReplayed) != "true" || retry.Header().Get("Location") != "/payments/pay_1" {
		t.Errorf("retry headers = %v", retry.Header())
	}
	if n := l.Count(""); n != 1 {
		t.Errorf("ledger holds %d payments, want 1", n)
	}

	l.insertErr = errLedgerDown
	checkProblem(t, send("k2", body), http.StatusServiceUnavailable, ProblemLedger)
	l.insertErr = nil
	if rec := send("k2", body); rec.Code != http.StatusCreated || rec.Header().Get(server.HeaderReplayed) != "" {
		t.Errorf("retry after a 503: %d %v, want a first execution", rec.Code, rec.Header())
	}
	if n := l.Count(""); n != 2 {
		t.Errorf("ledger holds %d payments, want 2", n)
	}
}

// TestListPages: GET /payments answers one page at a time (issue 27: one
// anonymous GET /payments returned 42.5 MB, and twenty at once took the demo
// to 3.68 GB): at most DefaultPageSize payments, or ?limit, with the cursor of
// the next page and the count of every page; following the cursors lists each
// payment once, in order.
func TestListPages(t *testing.T) {
	t.Parallel()
	a, _ := newAPI()
	const n = DefaultPageSize*2 + 50
	for i := range n {
		customer := "ada"
		if i%2 == 1 {
			customer = "bob"
		}
		if rec := create(a, `{"customer":"`+customer+`","amount":1,"currency":"EUR"}`); rec.Code != http.StatusCreated {
			t.Fatalf("create: %d", rec.Code)
		}
	}
	page := func(target string) ListResponse {
		t.Helper()
		rec := list(a, target)
		var got ListResponse
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &got) != nil {
			t.Fatalf("GET %s = %d %s", target, rec.Code, rec.Body)
		}
		return got
	}
	for _, c := range []struct {
		query string
		limit int
		total int
	}{{"", DefaultPageSize, n}, {"limit=7", 7, n}, {"customer=bob&limit=40", 40, n / 2}} {
		var ids []string
		next := ""
		for pages := 0; ; pages++ {
			target := "/payments?" + c.query
			if next != "" {
				target += "&after=" + next
			}
			got := page(target)
			if got.Count != c.total || len(got.Payments) > c.limit {
				t.Fatalf("GET %s: count %d, %d payments; want count %d, at most %d", target, got.Count, len(got.Payments), c.total, c.limit)
			}
			for _, p := range got.Payments {
				ids = append(ids, p.ID)
			}
			if got.Next == "" {
				break
			}
			if len(got.Payments) != c.limit || pages > n {
				t.Fatalf("GET %s: a page of %d before the last, want %d", target, len(got.Payments), c.limit)
			}
			next = got.Next
		}
		if len(ids) != c.total {
			t.Fatalf("%q: the pages listed %d payments, want %d", c.query, len(ids), c.total)
		}
		for i := 1; i < len(ids); i++ {
			var x, y int
			fmt.Sscanf(ids[i-1], "pay_%d", &x)
			fmt.Sscanf(ids[i], "pay_%d", &y)
			if y <= x {
				t.Fatalf("%q: %s after %s: not oldest first, or listed twice", c.query, ids[i], ids[i-1])
			}
		}
	}
	for _, bad := range []string{"limit=0", "limit=1001", "limit=x", "after=-1", "after=x"} {
		checkProblem(t, list(a, "/payments?"+bad), http.StatusUnprocessableEntity, ProblemInvalidValue)
	}
}

// TestBoundedMemLedger: a bounded ledger holds at most its size, and an owner
// that floods stops at the ledger's last eighth, which the owners within
// their share still get (issue 27: 300,000 payments in 8.5 s, no bound); a
// full ledger is answered 507, not retried.
func TestBoundedMemLedger(t *testing.T) {
	t.Parallel()
	l := NewBoundedMemLedger(16) // share 2
	ctx := context.Background()
	insert := func(owner string) error { return l.Insert(ctx, Payment{ID: "p", Customer: "c", Owner: owner}) }
	for i := range 14 {
		if err := insert("flood"); err != nil {
			t.Fatalf("insert %d of the flooding owner: %v", i+1, err)
		}
	}
	if err := insert("flood"); !errors.Is(err, ErrLedgerFull) {
		t.Fatalf("the flooding owner's 15th payment: %v, want ErrLedgerFull", err)
	}
	for i := range 2 {
		if err := insert("other"); err != nil {
			t.Fatalf("another owner's payment %d, within its share: %v", i+1, err)
		}
	}
	if err := insert("third"); !errors.Is(err, ErrLedgerFull) {
		t.Fatalf("a payment past the ledger's size: %v, want ErrLedgerFull", err)
	}
	if n := l.Count(""); n != 16 {
		t.Errorf("%d payments, want 16", n)
	}
	a := &API{Ledger: l, Owner: func(*http.Request) (string, error) { return "flood", nil }}
	checkProblem(t, create(a, `{"customer":"ada","amount":1,"currency":"EUR"}`), http.StatusInsufficientStorage, ProblemLedgerFull)
	if p := mustPanic(func() { NewBoundedMemLedger(0) }); p != "payments: NewBoundedMemLedger(0): want n >= 1" {
		t.Errorf("panic %q", p)
	}
}

func mustPanic(f func()) (msg string) {
	defer func() { msg, _ = recover().(string) }()
	f()
	return ""
}
