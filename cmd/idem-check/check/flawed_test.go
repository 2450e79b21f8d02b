package check

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A flaw is one way an idempotency layer goes wrong; the flawed server of
// these tests has exactly the flaws it is given.
type flaw string

const (
	flawMissingKey500   flaw = "answers 500 to a request without a key"
	flawKeyOptional     flaw = "processes a request without a key"
	flawValidKey500     flaw = "answers 500 to a valid new key"
	flawMarkFirst       flaw = "marks the first execution as a replay"
	flawReplayStatus    flaw = "replays 200 for a 201"
	flawReplayBody      flaw = "renders the replay's body anew"
	flawReplayHeaders   flaw = "replays without Location"
	flawReplayCookie    flaw = "replays Set-Cookie"
	flawNoMarker        flaw = "sends no replay marker"
	flawRunsAgain       flaw = "runs the handler again after storing, and answers the stored response"
	flawIgnoresBody     flaw = "ignores the body (no fingerprint)"
	flawConcurrentTwice flaw = "runs a duplicate while the first is in progress"
	flawStuckAfter5xx   flaw = "keeps the key in progress after a 5xx"
	flawStores5xx       flaw = "stores 5xx answers"
	flawGlobalKeys      flaw = "shares keys across principals"
	flawGlobalNoMarker  flaw = "shares keys across principals and sends no marker"
	flawBadKey500       flaw = "answers 500 to invalid keys"
	flawQuoted500       flaw = "answers 500 to a quoted key"
	flawQuotedDistinct  flaw = `takes "k" and k for two keys`
	flawNeverExpires    flaw = "never expires keys"
	flawNoLock          flaw = "stores only after the handler, with no claim"

	// The flaws of issue 28: each double-charges or drops a request, and
	// each passed the documented invocation before the rows that find it.
	flawFingerprintSubset flaw = "fingerprints the amount field only"
	flawIgnoresQuery      flaw = "leaves the query string out of the fingerprint"
	flawDropAfterMismatch flaw = "drops the record after refusing another body"
	flawShortRetention    flaw = "expires records after a second, documenting an hour"
	flawLeaseExpires      flaw = "lets a claim expire while its handler still runs"
	flawFirstOfTwoLines   flaw = "uses the first of two key lines silently"
	flawIgnoresPrefer     flaw = "makes a duplicate wait for the first, whatever its Prefer: wait"
	flawKeyIgnoredOnPUT   flaw = "ignores the key on PUT"
	flawIgnoresSlow       flaw = "ignores the slow headers"
	flawIgnoresFail       flaw = "ignores the fail header"
)

// flawedServer is a small idempotency layer with its effects counted:
// POST /op and PUT /op execute (one effect per execution, per principal and
// "ref" of the body) and answer 201 with a body unique to the execution, a
// Location and a cookie; GET /count?ref=R answers {"count": N} for the
// caller's principal and R.
//
// Request headers drive the handler: X-Fail: 1 answers 503 (inside the
// layer); X-Slow: 1 holds the execution until a duplicate with the same key
// arrives, X-Long: 1 until three have (or 5s pass), so in-progress rows are
// exact without timing.
type flawedServer struct {
	*httptest.Server
	flaws map[flaw]bool

	mu      sync.Mutex
	now     time.Time // the fake clock, moved by advance
	records map[string]*record
	effects map[string]int
	holds   map[string]*hold // per key: the first request held until duplicates arrive
	held    map[string]bool  // per key: a first request was held
	seq     int

	// received counts the requests that reached POST/PUT /op, counts the
	// GETs of /count: what the run sent, as the server saw it.
	received, counts atomic.Int64
	// slept is the time the run waited on purpose (Config.Sleep): the fake
	// clock's offset from real time, so that Config.Now counts it.
	slept atomic.Int64

	// overtake is how many X-Long requests are held back, before the
	// layer, until a duplicate of their key has been answered: the
	// duplicate overtakes them, as on a loaded machine (setOvertake).
	// overtaken holds, per principal and key, what such a request waits
	// for; longs counts the X-Long requests.
	overtake  int
	overtaken map[string]chan struct{}
	longs     atomic.Int64
}

// setOvertake makes the next n X-Long requests wait for a duplicate.
func (s *flawedServer) setOvertake(n int) {
	s.mu.Lock()
	s.overtake, s.overtaken = n, map[string]chan struct{}{}
	s.mu.Unlock()
}

// letOvertake holds r back, if it is an X-Long request still to be
// overtaken, until a duplicate of id has been answered (or 5 s), and
// returns what to call once r is answered: a duplicate frees the request
// it overtook.
func (s *flawedServer) letOvertake(r *http.Request, id string) (answered func()) {
	s.mu.Lock()
	if r.Header.Get("X-Long") == "" {
		ch := s.overtaken[id]
		s.mu.Unlock()
		return func() {
			if ch != nil {
				s.mu.Lock()
				if s.overtaken[id] == ch {
					delete(s.overtaken, id)
					close(ch)
				}
				s.mu.Unlock()
			}
		}
	}
	s.longs.Add(1)
	if s.overtake == 0 {
		s.mu.Unlock()
		return func() {}
	}
	s.overtake--
	ch := make(chan struct{})
	s.overtaken[id] = ch
	s.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
	}
	return func() {}
}

// A hold keeps a first request in its handler until need duplicates arrived.
type hold struct {
	need, seen int
	done       chan struct{}
	prefer     bool // the duplicate that released it carried Prefer
}

// flawedLongDuplicates is how many duplicates an X-Long request waits for;
// with flawLeaseExpires, the claim is gone for the second.
const flawedLongDuplicates = 3

// flawedPreferTail is how long an X-Slow request still runs after its
// duplicate arrived, with flawIgnoresPrefer: past Prefer: wait=1.
const flawedPreferTail = 2 * time.Second

type record struct {
	fp      [32]byte
	done    bool
	dups    int           // duplicates that found the claim in progress
	long    bool          // of a claim: its request asked for X-Long
	settled chan struct{} // of a claim: closed when it is recorded or released
	status  int
	header  http.Header
	body    []byte
	expires time.Time
}

const flawedTTL = time.Hour

func newFlawedServer(t *testing.T, flaws ...flaw) *flawedServer {
	s := &flawedServer{flaws: map[flaw]bool{}, now: time.Unix(1e9, 0), records: map[string]*record{},
		effects: map[string]int{}, holds: map[string]*hold{}, held: map[string]bool{}}
	for _, f := range flaws {
		s.flaws[f] = true
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /op", s.op)
	mux.HandleFunc("PUT /op", s.op)
	mux.HandleFunc("GET /count", func(w http.ResponseWriter, r *http.Request) {
		s.counts.Add(1)
		s.mu.Lock()
		n := s.effects[r.Header.Get("Authorization")+"|"+r.URL.Query().Get("ref")]
		s.mu.Unlock()
		fmt.Fprintf(w, `{"count":%d}`, n)
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func (s *flawedServer) advance(d time.Duration) {
	s.mu.Lock()
	s.now = s.now.Add(d)
	s.mu.Unlock()
}

// sleep is the run's Config.Sleep: it moves the server's clock, and the
// run's (clock), by d at once.
func (s *flawedServer) sleep(_ context.Context, d time.Duration) error {
	s.advance(d)
	s.slept.Add(int64(d))
	return nil
}

// clock is the run's Config.Now: real time plus the time it waited on
// purpose, so that Report.Duration is what the run would take with real
// waits.
func (s *flawedServer) clock() time.Time {
	return time.Now().Add(time.Duration(s.slept.Load()))
}

// config is a Config for every row of this server, on both its methods.
func (s *flawedServer) config() Config {
	return Config{
		URL:            s.URL + "/op",
		Methods:        []string{http.MethodPost, http.MethodPut},
		Body:           []byte(`{"amount":100,"currency":"EUR","ref":"op_{{id}}"}`),
		Header:         http.Header{"Authorization": {"Bearer alice"}, "Content-Type": {"application/json"}},
		OtherPrincipal: http.Header{"Authorization": {"Bearer bob"}},
		Slow:           http.Header{"X-Slow": {"1"}},
		LeaseSlow:      http.Header{"X-Long": {"1"}},
		LeaseStep:      100 * time.Millisecond, // a held duplicate takes 100 ms or more: no loopback round trip, even loaded
		Fail:           http.Header{"X-Fail": {"1"}},
		TTL:            flawedTTL,
		ReplayAfter:    flawedTTL / 2,
		Effect: &EffectURL{URL: s.URL + "/count?ref=op_{{id}}", Path: "count",
			Header: http.Header{"Authorization": {"Bearer alice"}}},
		Chaos:     true,
		Transport: s.Client().Transport,
		Sleep:     s.sleep,
		Now:       s.clock,
	}
}

func problem(w http.ResponseWriter, status int, title string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"title":%q,"status":%d}`, title, status)
}

// parseKey reads the key as idem does: raw, or a Structured Field String.
func (s *flawedServer) parseKey(r *http.Request) (string, int, string) {
	lines := r.Header.Values("Idempotency-Key")
	bad := http.StatusBadRequest
	if s.flaws[flawBadKey500] {
		bad = http.StatusInternalServerError
	}
	switch {
	case len(lines) == 0:
		if s.flaws[flawMissingKey500] {
			return "", http.StatusInternalServerError, "no key"
		}
		if s.flaws[flawKeyOptional] {
			return "", 0, ""
		}
		return "", http.StatusBadRequest, "missing key"
	case len(lines) > 1 && s.flaws[flawFirstOfTwoLines]:
		lines = lines[:1]
	case len(lines) > 1:
		return "", bad, "two key lines"
	}
	k := lines[0]
	if strings.HasPrefix(k, `"`) {
		if s.flaws[flawQuoted500] {
			return "", http.StatusInternalServerError, "quoted"
		}
		if len(k) < 2 || !strings.HasSuffix(k, `"`) || strings.ContainsAny(k[1:len(k)-1], `"\`) {
			return "", bad, "malformed Structured Field"
		}
		if !s.flaws[flawQuotedDistinct] {
			k = k[1 : len(k)-1]
		}
	}
	if k == "" || len(k) > 255 {
		return "", bad, "blank or too long"
	}
	for _, c := range []byte(k) {
		if c < 0x21 || c > 0x7e {
			return "", bad, "not visible ASCII"
		}
	}
	return k, 0, ""
}

// fingerprint identifies the request as the layer sees it: method, query
// and body, less what its flaws leave out.
func (s *flawedServer) fingerprint(r *http.Request, body []byte) [32]byte {
	query := r.URL.RawQuery
	if s.flaws[flawIgnoresQuery] {
		query = ""
	}
	if s.flaws[flawFingerprintSubset] {
		var v struct{ Amount json.Number }
		_ = json.Unmarshal(body, &v)
		body = []byte(v.Amount)
	}
	if s.flaws[flawIgnoresBody] {
		body = nil
	}
	return sha256.Sum256([]byte(r.Method + "\x00" + query + "\x00" + string(body)))
}

func (s *flawedServer) op(w http.ResponseWriter, r *http.Request) {
	s.received.Add(1)
	body, _ := io.ReadAll(r.Body)
	principal := r.Header.Get("Authorization")
	var ref struct{ Ref string }
	_ = json.Unmarshal(body, &ref)
	counter := principal + "|" + ref.Ref
	if r.Method == http.MethodPut && s.flaws[flawKeyIgnoredOnPUT] {
		s.execute(w, r, principal, counter)
		return
	}
	key, status, why := s.parseKey(r)
	if status != 0 {
		problem(w, status, why)
		return
	}
	if key == "" { // processed without a key
		s.execute(w, r, principal, counter)
		return
	}
	if s.flaws[flawValidKey500] {
		problem(w, http.StatusInternalServerError, "valid key")
		return
	}
	id := principal + "|" + key
	if s.flaws[flawGlobalKeys] || s.flaws[flawGlobalNoMarker] {
		id = key
	}
	defer s.letOvertake(r, id)()
	fp := s.fingerprint(r, body)

	s.mu.Lock()
	if h := s.holds[id]; h != nil {
		h.seen++ // a duplicate of a held first request
		if h.seen == h.need {
			h.prefer = r.Header.Get("Prefer") != ""
			close(h.done)
			delete(s.holds, id)
		}
	}
	rec := s.records[id]
	if rec != nil && rec.done && !s.flaws[flawNeverExpires] && !s.now.Before(rec.expires) {
		rec = nil
	}
	if rec != nil && !rec.done {
		rec.dups++
		if s.flaws[flawLeaseExpires] && rec.long && rec.dups >= 2 {
			rec = nil // the claim's lease ran out under its handler
		}
	}
	switch {
	case rec == nil:
		if !s.flaws[flawNoLock] {
			s.records[id] = &record{fp: fp, settled: make(chan struct{}), long: r.Header.Get("X-Long") != ""}
		}
	case rec.fp != fp:
		if s.flaws[flawDropAfterMismatch] {
			delete(s.records, id)
		}
		s.mu.Unlock()
		problem(w, http.StatusUnprocessableEntity, "another body")
		return
	case !rec.done && s.flaws[flawIgnoresPrefer] && r.Header.Get("Prefer") != "":
		s.mu.Unlock()
		s.waitSettled(w, id, rec)
		return
	case !rec.done && !s.flaws[flawConcurrentTwice]:
		s.mu.Unlock()
		problem(w, http.StatusConflict, "in progress")
		return
	case rec.done:
		s.mu.Unlock()
		if s.flaws[flawRunsAgain] {
			s.execute(httptest.NewRecorder(), r, principal, counter)
		}
		s.replay(w, rec)
		return
	}
	var h *hold
	switch {
	case s.flaws[flawIgnoresSlow] || s.held[id]:
	case r.Header.Get("X-Slow") != "":
		h = &hold{need: 1, done: make(chan struct{})}
	case r.Header.Get("X-Long") != "":
		h = &hold{need: flawedLongDuplicates, done: make(chan struct{})}
	}
	if h != nil {
		s.held[id] = true
		s.holds[id] = h
	}
	s.mu.Unlock()
	if h != nil {
		select {
		case <-h.done:
		case <-time.After(5 * time.Second):
		}
		if s.flaws[flawIgnoresPrefer] && h.prefer {
			time.Sleep(flawedPreferTail) // the handler's run goes on past Prefer: wait=1
		}
	}

	rw := httptest.NewRecorder()
	if r.Header.Get("X-Fail") != "" && !s.flaws[flawIgnoresFail] {
		problem(rw, http.StatusServiceUnavailable, "failed")
	} else {
		s.execute(rw, r, principal, counter)
	}
	retention := flawedTTL
	if s.flaws[flawShortRetention] {
		retention = time.Second
	}
	s.mu.Lock()
	if claim := s.records[id]; claim != nil && claim.settled != nil && !claim.done {
		close(claim.settled)
	}
	switch {
	case rw.Code >= 500 && s.flaws[flawStuckAfter5xx]:
	case rw.Code >= 500 && !s.flaws[flawStores5xx]:
		delete(s.records, id)
	default:
		s.records[id] = &record{fp: fp, done: true, status: rw.Code, header: rw.Header().Clone(), body: rw.Body.Bytes(),
			expires: s.now.Add(retention)}
	}
	s.mu.Unlock()
	for k, vs := range rw.Header() {
		w.Header()[k] = vs
	}
	if s.flaws[flawMarkFirst] {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(rw.Code)
	_, _ = w.Write(rw.Body.Bytes())
}

// waitSettled waits until the claim rec under id is recorded or released,
// then replays the record.
func (s *flawedServer) waitSettled(w http.ResponseWriter, id string, claim *record) {
	select {
	case <-claim.settled:
	case <-time.After(5 * time.Second):
		problem(w, http.StatusConflict, "in progress")
		return
	}
	s.mu.Lock()
	rec := s.records[id]
	s.mu.Unlock()
	if rec == nil || !rec.done {
		problem(w, http.StatusConflict, "released")
		return
	}
	s.replay(w, rec)
}

// execute is the operation: one effect, counted under counter (principal
// and ref), a body unique to it.
func (s *flawedServer) execute(w http.ResponseWriter, r *http.Request, principal, counter string) {
	s.mu.Lock()
	s.effects[counter]++
	s.seq++
	n := s.seq
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/op/%d", n))
	w.Header().Set("Set-Cookie", fmt.Sprintf("session=%s-%d", strings.TrimPrefix(principal, "Bearer "), n))
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"id": n, "principal": principal})
}

func (s *flawedServer) replay(w http.ResponseWriter, rec *record) {
	for _, h := range []string{"Content-Type", "Location"} {
		if v := rec.header.Get(h); v != "" && !(h == "Location" && s.flaws[flawReplayHeaders]) {
			w.Header().Set(h, v)
		}
	}
	if s.flaws[flawReplayCookie] || s.flaws[flawGlobalNoMarker] {
		w.Header()["Set-Cookie"] = rec.header.Values("Set-Cookie")
	}
	if !s.flaws[flawNoMarker] && !s.flaws[flawGlobalNoMarker] {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	status, body := rec.status, rec.body
	if s.flaws[flawReplayStatus] && status == http.StatusCreated {
		status = http.StatusOK
	}
	if s.flaws[flawReplayBody] {
		body = append([]byte(" "), body...)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
