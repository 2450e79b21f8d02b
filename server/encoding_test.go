package server

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func deflated(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zlib.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestAccepts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		ae     []string
		coding string
		want   bool
	}{
		{nil, "gzip", false}, // no Accept-Encoding: the client did not say it decodes anything
		{[]string{""}, "gzip", false},
		{[]string{"gzip"}, "gzip", true},
		{[]string{"GZip"}, "gzip", true},
		{[]string{"x-gzip"}, "gzip", true},
		{[]string{"gzip"}, "deflate", false},
		{[]string{"deflate, gzip;q=1.0, br"}, "gzip", true},
		{[]string{"br", "gzip"}, "gzip", true},    // two field lines
		{[]string{" , ,gzip , "}, "gzip", true},   // empty elements
		{[]string{"gzip ; q=0.5"}, "gzip", true},  // OWS around ';'
		{[]string{"gzip;Q=0.5"}, "gzip", true},    // q in either case
		{[]string{"gzip;q=0.001"}, "gzip", true},  // the least weight above 0
		{[]string{"gzip;q=0"}, "gzip", false},     // refused
		{[]string{"gzip;q=0.000"}, "gzip", false}, // refused
		{[]string{"gzip;q=0."}, "gzip", false},    // "0." is a qvalue: 0
		{[]string{"gzip;q=1."}, "gzip", true},     // "1." is a qvalue: 1
		{[]string{"*"}, "gzip", true},             // any coding
		{[]string{"*;q=0"}, "gzip", false},        // no coding
		{[]string{"*, gzip;q=0"}, "gzip", false},  // the named entry beats "*"
		{[]string{"gzip, *;q=0"}, "gzip", true},   // and the other way round
		{[]string{"identity"}, "gzip", false},     // identity only
		{[]string{"identity;q=0"}, "gzip", false}, // nothing acceptable: identity is sent anyway
		{[]string{"identity;q=0, gzip"}, "gzip", true},
		{[]string{"gzip;q=0.5, identity"}, "gzip", false},      // identity preferred
		{[]string{"gzip;q=0.5, identity;q=0.5"}, "gzip", true}, // a tie: the recorded form
		{[]string{"gzip;q=0.5, *"}, "gzip", false},             // "*" gives identity 1
		{[]string{"br;q=1.0, gzip;q=0.5"}, "gzip", true},       // identity not listed does not compete
		{[]string{"gzip, gzip;q=0"}, "gzip", false},            // listed twice: the lower weight
		{[]string{"gzip;q=2"}, "gzip", false},                  // malformed field: identity only
		{[]string{"gzip;q=1.001"}, "gzip", false},              // above 1
		{[]string{"gzip;q=0.0001"}, "gzip", false},             // four decimals
		{[]string{"gzip;q=.5"}, "gzip", false},                 // no leading digit
		{[]string{"gzip;q= 1"}, "gzip", false},                 // no space after "="
		{[]string{"gzip;level=9"}, "gzip", false},              // a parameter other than q
		{[]string{"gzip;q=1;level=9"}, "gzip", false},          // a second parameter
		{[]string{"gzip;"}, "gzip", false},                     // an empty parameter
		{[]string{"gzip, br;q=x"}, "gzip", false},              // any malformed element
		{[]string{`"gzip"`}, "gzip", false},                    // not a token
		{[]string{"gzip deflate"}, "gzip", false},              // not a token
		{[]string{"deflate"}, "deflate", true},
	} {
		if got := accepts(tt.ae, tt.coding); got != tt.want {
			t.Errorf("accepts(%q, %q) = %v, want %v", tt.ae, tt.coding, got, tt.want)
		}
	}
}

func TestQvalue(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]int{"0": 0, "0.": 0, "0.5": 500, "0.05": 50, "0.123": 123, "1": 1000, "1.": 1000, "1.000": 1000} {
		if got, ok := qvalue(s); !ok || got != want {
			t.Errorf("qvalue(%q) = %d, %v; want %d", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "2", "1.5", "1.001", "0.1234", "-0", "+1", "0,5", ".5", "0.a", "01"} {
		if got, ok := qvalue(s); ok {
			t.Errorf("qvalue(%q) = %d, want an error", s, got)
		}
	}
}

// refAccepts is accepts written another way, for the fuzzer to compare
// with: the whole field split at commas, each element matched by one regular
// expression, weights as floats.
var refElement = regexp.MustCompile(`^([!#$%&'*+\-.^_` + "`" + `|~0-9A-Za-z]+)[ \t]*(?:;[ \t]*[qQ]=(0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?))?$`)

func refAccepts(ae []string, coding string) bool {
	weights := map[string]float64{}
	for _, e := range strings.Split(strings.Join(ae, ","), ",") {
		e = strings.Trim(e, " \t")
		if e == "" {
			continue
		}
		m := refElement.FindStringSubmatch(e)
		if m == nil {
			return false
		}
		name := strings.ToLower(m[1])
		if name == "x-gzip" {
			name = "gzip"
		}
		w := 1.0
		if m[2] != "" {
			w, _ = strconv.ParseFloat(strings.TrimSuffix(m[2], "."), 64)
		}
		if old, ok := weights[name]; !ok || w < old {
			weights[name] = w
		}
	}
	get := func(name string) (float64, bool) {
		if w, ok := weights[name]; ok {
			return w, true
		}
		w, ok := weights["*"]
		return w, ok
	}
	q, ok := get(coding)
	if !ok || q == 0 {
		return false
	}
	qi, ok := get("identity")
	return !ok || q >= qi
}

// FuzzAccepts compares accepts with refAccepts, and checks what the
// handler is offered: only codings the middleware decodes, and gzip still
// accepted when the request named it.
func FuzzAccepts(f *testing.F) {
	for _, s := range []string{"gzip", "gzip;q=0.5, identity", "*;q=0", "br, zstd, gzip;q=0.001", "x-gzip", "identity;q=0",
		"gzip;q=1.000", "GZIP ; Q=0.", "deflate,,gzip", "gzip;level=1", "*, gzip;q=0", "gzip\t;\tq=1"} {
		f.Add(s, "gzip")
	}
	f.Add("deflate;q=0.3, gzip;q=0.2", "deflate")
	f.Fuzz(func(t *testing.T, field, coding string) {
		coding = codingName(coding)
		if coding == "identity" || !isToken(coding) {
			return
		}
		lines := strings.Split(field, "\n")
		if got, want := accepts(lines, coding), refAccepts(lines, coding); got != want {
			t.Fatalf("accepts(%q, %q) = %v, the reference says %v", lines, coding, got, want)
		}
		kept, changed := decodableElements(lines)
		if !changed {
			return
		}
		for l := (fieldList{lines: []string{kept}}); ; {
			e, ok := l.next()
			if !ok {
				break
			}
			if !decodable(elementCoding(e)) {
				t.Fatalf("offered %q from %q: %q is not decodable", kept, lines, e)
			}
		}
		if coding == "gzip" && accepts(lines, "gzip") && !strings.Contains(strings.ToLower(field), "*") && !accepts([]string{kept}, "gzip") {
			t.Fatalf("offered %q from %q: gzip, accepted, is no longer", kept, lines)
		}
	})
}

func TestDecodableElements(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		ae      []string
		want    string
		changed bool
	}{
		{nil, "", false},
		{[]string{"gzip"}, "", false},
		{[]string{"gzip, deflate;q=0.5, identity", "x-gzip"}, "", false},
		{[]string{"gzip, deflate, br, zstd"}, "gzip, deflate", true},
		{[]string{"br;q=1.0, gzip;q=0.8"}, "gzip;q=0.8", true},
		{[]string{"br"}, "", true},
		{[]string{"*"}, "", true},
		{[]string{"br", "gzip;q=0"}, "gzip;q=0", true},
	} {
		got, changed := decodableElements(tt.ae)
		if got != tt.want || changed != tt.changed {
			t.Errorf("decodableElements(%q) = %q, %v; want %q, %v", tt.ae, got, changed, tt.want, tt.changed)
		}
	}
}

func TestForRetry(t *testing.T) {
	t.Parallel()
	doc := []byte(strings.Repeat(`{"line":"receipt"}`, 40))
	gz := gzipped(t, doc)
	const max = 1 << 20
	stored := func(body []byte, kv ...string) *Response {
		h := http.Header{"Content-Type": {"application/json"}}
		for i := 0; i+1 < len(kv); i += 2 {
			h[kv[i]] = append(h[kv[i]], kv[i+1])
		}
		return &Response{Status: http.StatusCreated, Header: h, Body: body}
	}
	t.Run("no coding: the record itself", func(t *testing.T) {
		resp := stored(doc)
		if out, err := forRetry(resp, aeHeader(nil), max); err != nil || out != resp {
			t.Errorf("forRetry = %v, %v; want the record itself", out, err)
		}
	})
	t.Run("accepted with its Vary: the record itself", func(t *testing.T) {
		resp := stored(gz, "Content-Encoding", "gzip", "Vary", "Accept-Encoding")
		if out, err := forRetry(resp, aeHeader([]string{"gzip"}), max); err != nil || out != resp {
			t.Errorf("forRetry = %v, %v; want the record itself", out, err)
		}
	})
	t.Run("accepted without Vary: Vary added, record untouched", func(t *testing.T) {
		resp := stored(gz, "Content-Encoding", "gzip", "Vary", "Origin")
		out, err := forRetry(resp, aeHeader([]string{"gzip"}), max)
		if err != nil || !bytes.Equal(out.Body, gz) || strings.Join(out.Header["Vary"], ",") != "Origin,Accept-Encoding" {
			t.Fatalf("forRetry = %+v, %v", out, err)
		}
		if strings.Join(resp.Header["Vary"], ",") != "Origin" {
			t.Errorf("the record changed: Vary %q", resp.Header["Vary"])
		}
	})
	t.Run("not accepted: decoded, representation headers fixed", func(t *testing.T) {
		resp := stored(gz, "Content-Encoding", "gzip", "Etag", `"v1"`, "Content-Digest", "sha-256=:x:", "Location", "/p/1")
		out, err := forRetry(resp, aeHeader([]string{"br"}), max)
		if err != nil || out.Status != http.StatusCreated || !bytes.Equal(out.Body, doc) {
			t.Fatalf("forRetry = %+v, %v; want 201 and the decoded body", out, err)
		}
		want := http.Header{"Content-Type": {"application/json"}, "Location": {"/p/1"}, "Etag": {`W/"v1"`}, "Vary": {"Accept-Encoding"}}
		if !equalHeader(out.Header, want) {
			t.Errorf("headers %v, want %v", out.Header, want)
		}
		if resp.Header.Get("Content-Encoding") != "gzip" || !bytes.Equal(resp.Body, gz) || resp.Header.Get("Etag") != `"v1"` {
			t.Errorf("the record changed: %v", resp.Header)
		}
	})
	t.Run("weak ETags kept, malformed ones dropped", func(t *testing.T) {
		out, err := forRetry(stored(gz, "Content-Encoding", "gzip", "Etag", `W/"a"`, "Etag", "bare"), nil, max)
		if err != nil || strings.Join(out.Header["Etag"], ",") != `W/"a"` {
			t.Errorf("forRetry = %v, %v; want ETag W/\"a\" alone", out.Header, err)
		}
	})
	t.Run("layered codings undone in reverse", func(t *testing.T) {
		out, err := forRetry(stored(gzipped(t, deflated(t, doc)), "Content-Encoding", "deflate", "Content-Encoding", "gzip"), aeHeader([]string{"gzip"}), max)
		if err != nil || !bytes.Equal(out.Body, doc) || out.Header["Content-Encoding"] != nil {
			t.Errorf("forRetry = %v, %v; want decoded (deflate is not accepted)", out, err)
		}
	})
	t.Run("empty body: the coding dropped", func(t *testing.T) {
		out, err := forRetry(stored(nil, "Content-Encoding", "gzip"), nil, max)
		if err != nil || len(out.Body) != 0 || out.Header["Content-Encoding"] != nil {
			t.Errorf("forRetry = %+v, %v", out, err)
		}
	})
	t.Run("identity: as recorded", func(t *testing.T) {
		resp := stored(doc, "Content-Encoding", "identity")
		if out, err := forRetry(resp, aeHeader(nil), max); err != nil || out != resp {
			t.Errorf("forRetry = %v, %v; want the record itself", out, err)
		}
	})
	for name, tt := range map[string]struct {
		resp *Response
		want error
	}{
		"br":           {stored([]byte("\x0b\x02\x80hi\x03"), "Content-Encoding", "br"), ErrUndecodable},
		"corrupt gzip": {stored(gz[:len(gz)-4], "Content-Encoding", "gzip"), ErrUndecodable},
		"not gzip":     {stored(doc, "Content-Encoding", "gzip"), ErrUndecodable},
		"bad list":     {stored(gz, "Content-Encoding", `"gzip"`), ErrUndecodable},
		"over max":     {stored(gzipped(t, make([]byte, max+1)), "Content-Encoding", "gzip"), ErrResponseTooLarge},
	} {
		t.Run(name, func(t *testing.T) {
			if out, err := forRetry(tt.resp, aeHeader([]string{"identity"}), max); !errors.Is(err, tt.want) {
				t.Errorf("forRetry = %v, %v; want %v", out, err, tt.want)
			}
			if err := checkDecodable(tt.resp, max); !errors.Is(err, tt.want) {
				t.Errorf("checkDecodable = %v; want %v", err, tt.want)
			}
		})
	}
}

// aeHeader is a request header with the Accept-Encoding lines ae (none when nil).
func aeHeader(ae []string) http.Header {
	if ae == nil {
		return http.Header{}
	}
	return http.Header{"Accept-Encoding": ae}
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// selfCompressing answers 201 with body in coding (gzip, or any label over
// the bytes given), with a strong ETag and without Vary: a handler that
// compresses its own responses.
func selfCompressing(coding string, body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header()["content-encoding"] = []string{coding} // not canonical: recorded all the same
		w.Header().Set("ETag", `"v1"`)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	}
}

// A handler that compresses its own answer, without Vary and with a strong
// ETag: the record keeps its Content-Encoding; a retry that accepts gzip gets
// the same bytes, one that does not the decoded ones, each with Vary.
func TestSelfCompressedAnswerIsReplayedInAnAcceptedCoding(t *testing.T) {
	t.Parallel()
	doc := []byte(`{"id":"pay_1"}`)
	store := &fakeStore{}
	h := counting(selfCompressing("gzip", gzipped(t, doc)))
	mw := Middleware(store)(h)
	first := serve(mw, request("POST", "/p", "{}", HeaderKey, "k", "Accept-Encoding", "gzip"))
	if first.Code != http.StatusCreated || first.Header().Get("Vary") != "" {
		t.Fatalf("first: %d %v", first.Code, first.Header())
	}
	if rec := store.records[[2]string{"", "k"}].resp; rec.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("recorded headers %v lack the Content-Encoding", rec.Header)
	}
	zipped := serve(mw, request("POST", "/p", "{}", HeaderKey, "k", "Accept-Encoding", "gzip"))
	if !bytes.Equal(zipped.Body.Bytes(), first.Body.Bytes()) || zipped.Header().Get("Content-Encoding") != "gzip" ||
		zipped.Header().Get("Etag") != `"v1"` || zipped.Header().Get("Vary") != "Accept-Encoding" {
		t.Errorf("retry accepting gzip: %v %q, want the recorded bytes, their ETag, and Vary", zipped.Header(), zipped.Body)
	}
	plain := serve(mw, request("POST", "/p", "{}", HeaderKey, "k"))
	if plain.Code != http.StatusCreated || !bytes.Equal(plain.Body.Bytes(), doc) || plain.Header().Get("Content-Encoding") != "" ||
		plain.Header().Get("Etag") != `W/"v1"` || plain.Header().Get("Vary") != "Accept-Encoding" ||
		plain.Header().Get(HeaderReplayed) != "true" {
		t.Errorf("retry without Accept-Encoding: %d %v %q, want the decoded body, W/\"v1\", Vary, replayed", plain.Code, plain.Header(), plain.Body)
	}
	if n := h.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times", n)
	}
}

// The handler is offered only the codings the middleware can decode; the
// caller's request is not changed.
func TestHandlerIsOfferedDecodableCodings(t *testing.T) {
	t.Parallel()
	for ae, want := range map[string]string{
		"gzip, deflate, br, zstd": "gzip, deflate",
		"br;q=1, gzip;q=0.8":      "gzip;q=0.8",
		"br":                      "identity",
		"*":                       "identity",
		"gzip;q=0.5, identity":    "gzip;q=0.5, identity",
		"":                        "",
	} {
		var seen []string
		mw := Middleware(&fakeStore{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen = r.Header["Accept-Encoding"]
			w.WriteHeader(http.StatusCreated)
		}))
		r := request("POST", "/p", "{}", HeaderKey, "k")
		if ae != "" {
			r.Header.Set("Accept-Encoding", ae)
		}
		serve(mw, r)
		if strings.Join(seen, "|") != want {
			t.Errorf("Accept-Encoding %q: the handler saw %q, want %q", ae, seen, want)
		}
		if got := r.Header.Get("Accept-Encoding"); got != ae {
			t.Errorf("Accept-Encoding %q: the caller's request now says %q", ae, got)
		}
	}
}

// A response in a coding the middleware cannot decode (a handler that
// ignores Accept-Encoding) is not recorded, nor sent: 500 unprotectable and
// the key released, or outcome-unknown after DeclareEffect. A status that is
// not recorded anyway goes out as it is.
func TestUndecodableAnswerIsNotRecorded(t *testing.T) {
	t.Parallel()
	br := []byte("\x0b\x02\x80{}\x03")
	t.Run("released", func(t *testing.T) {
		store := &fakeStore{}
		h := counting(selfCompressing("br", br))
		mw := Middleware(store)(h)
		for range 2 {
			rec := serve(mw, request("POST", "/p", "{}", HeaderKey, "k", "Accept-Encoding", "br"))
			checkProblem(t, rec, http.StatusInternalServerError, ProblemUnprotectable)
			if !strings.Contains(rec.Body.String(), `\"br\"`) {
				t.Errorf("detail %s does not name the coding", rec.Body)
			}
		}
		if _, keeps := store.stats(); h.runs.Load() != 2 || slices.Contains(keeps, true) {
			t.Errorf("runs %d, keeps %v: want two runs, nothing kept", h.runs.Load(), keeps)
		}
	})
	t.Run("after DeclareEffect", func(t *testing.T) {
		store := &fakeStore{}
		mw := Middleware(store)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			DeclareEffect(r.Context())
			selfCompressing("br", br)(w, r)
		}))
		checkProblem(t, serve(mw, request("POST", "/p", "{}", HeaderKey, "k")), http.StatusInternalServerError, ProblemOutcomeUnknown)
		again := serve(mw, request("POST", "/p", "{}", HeaderKey, "k"))
		if again.Code != http.StatusInternalServerError || !strings.Contains(again.Body.String(), ProblemOutcomeUnknown) ||
			again.Header().Get(HeaderReplayed) != "true" {
			t.Errorf("retry: %d %v %s, want outcome-unknown replayed", again.Code, again.Header(), again.Body)
		}
	})
	t.Run("gzip that does not decode", func(t *testing.T) {
		mw := Middleware(&fakeStore{})(selfCompressing("gzip", []byte(`{"not":"gzip"}`)))
		checkProblem(t, serve(mw, request("POST", "/p", "{}", HeaderKey, "k")), http.StatusInternalServerError, ProblemUnprotectable)
	})
	t.Run("5xx sent as it is", func(t *testing.T) {
		mw := Middleware(&fakeStore{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "br")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write(br)
		}))
		if rec := serve(mw, request("POST", "/p", "{}", HeaderKey, "k")); rec.Code != http.StatusServiceUnavailable || !bytes.Equal(rec.Body.Bytes(), br) {
			t.Errorf("503 in br: %d %q, want it sent as it is", rec.Code, rec.Body)
		}
	})
}

// A record in a coding the middleware cannot decode (recorded by an older
// version, which allowed it) is replayed to a retry that accepts it, and
// answered 406 to one that does not, never sent in that coding.
func TestUndecodableRecordIsNotAcceptable(t *testing.T) {
	t.Parallel()
	br := &Response{Status: http.StatusCreated, Header: http.Header{"Content-Encoding": {"br"}}, Body: []byte("\x0b\x02\x80{}\x03")}
	store := &fakeStore{do: func(context.Context, Request, RunFunc) (Result, error) {
		return Result{Outcome: OutcomeReplayed, Response: br}, nil
	}}
	var ev OutcomeEvent
	mw := Middleware(store, WithOnOutcome(func(e OutcomeEvent) { ev = e }))(http.NotFoundHandler())
	if rec := serve(mw, request("POST", "/p", "{}", HeaderKey, "k", "Accept-Encoding", "br, gzip")); rec.Code != http.StatusCreated ||
		rec.Header().Get("Content-Encoding") != "br" || !bytes.Equal(rec.Body.Bytes(), br.Body) {
		t.Errorf("retry accepting br: %d %v, want the record", rec.Code, rec.Header())
	}
	checkProblem(t, serve(mw, request("POST", "/p", "{}", HeaderKey, "k", "Accept-Encoding", "gzip")), http.StatusNotAcceptable, ProblemNotAcceptable)
	if ev.Outcome != OutcomeReplayed || ev.Status != http.StatusNotAcceptable || !errors.Is(ev.Err, ErrUndecodable) {
		t.Errorf("event %+v, want the replay answered 406 with ErrUndecodable", ev)
	}
}
