package server

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

func TestExactBody(t *testing.T) {
	t.Parallel()
	base := ExactBody(httptest.NewRequest("POST", "/payments?x=1", nil), []byte(`{"a":1}`))
	if len(base) != 64 {
		t.Fatalf("fingerprint %q is not 64 hex characters", base)
	}
	differ := []struct {
		name, method, target, body string
	}{
		{"method", "PATCH", "/payments?x=1", `{"a":1}`},
		{"path", "POST", "/payment?x=1", `{"a":1}`},
		{"query", "POST", "/payments?x=2", `{"a":1}`},
		{"no query", "POST", "/payments", `{"a":1}`},
		{"body", "POST", "/payments?x=1", `{"a":2}`},
		{"whitespace", "POST", "/payments?x=1", `{"a": 1}`},
		{"path and body boundary", "POST", "/payments?x=1%7B", `"a":1}`},
	}
	for _, c := range differ {
		if got := ExactBody(httptest.NewRequest(c.method, c.target, nil), []byte(c.body)); got == base {
			t.Errorf("%s: same fingerprint as the base request", c.name)
		}
	}
	if again := ExactBody(httptest.NewRequest("POST", "/payments?x=1", nil), []byte(`{"a":1}`)); again != base {
		t.Errorf("same request, different fingerprint")
	}
}

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("POST", "/payments", nil)
	fp := func(s string) string { return CanonicalJSON(r, []byte(s)) }
	same := [][2]string{
		{`{"a":1,"b":[true,null,"x"]}`, "{ \"b\" : [ true , null , \"x\" ] ,\n\t\"a\" : 1 }\n"},
		{`{"a":{"y":1,"x":2}}`, `{"a":{"x":2,"y":1}}`},
		{`"A"`, `"\u0041"`},
		{`"\/"`, `"/"`},
		{`[]`, ` [ ] `},
	}
	for _, c := range same {
		if fp(c[0]) != fp(c[1]) {
			t.Errorf("%s and %s: different fingerprints, want equal", c[0], c[1])
		}
	}
	differ := [][2]string{
		{`{"a":1}`, `{"a":2}`},
		{`{"a":1}`, `{"a":1.0}`},
		{`{"a":1}`, `{"a":"1"}`},
		{`[1,2]`, `[2,1]`},
		{`{"a":1}`, `{"a":1,"b":null}`},
		{`{"a":1,"a":1}`, `{"a":1}`},        // duplicate keys fall back to the exact bytes
		{`{"a":1,"a":1}`, `{"a":1, "a":1}`}, // ... so whitespace counts again
		{`not json`, `not  json`},
		{`"\ud800"`, `"\ufffd"`}, // lone surrogate: exact bytes
		{"\"\xff\"", "\"\xfe\""}, // invalid UTF-8: exact bytes
		{`{}`, `{} {}`},
	}
	for _, c := range differ {
		if fp(c[0]) == fp(c[1]) {
			t.Errorf("%s and %s: same fingerprint, want different", c[0], c[1])
		}
	}
	if CanonicalJSON(r, []byte(`{"a":1}`)) == CanonicalJSON(httptest.NewRequest("POST", "/other", nil), []byte(`{"a":1}`)) {
		t.Errorf("CanonicalJSON ignores the path")
	}
	// A non-JSON body is its exact bytes, but never equal to ExactBody's hash of them.
	if fp(`not json`) != ExactBody(r, []byte(`not json`)) {
		t.Errorf("invalid JSON should fall back to the exact-body fingerprint")
	}
}

// reversedJSON re-serialises a valid JSON value with every object's members in
// reverse order and other whitespace, independently of canonicalJSON.
func reversedJSON(t *testing.T, b []byte) []byte {
	type node struct {
		text  []byte // scalar, as encoding/json writes it
		open  byte   // '[' or '{' for containers
		keys  []string
		items []*node
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var parse func() *node
	parse = func() *node {
		tok, err := d.Token()
		if err != nil {
			t.Fatalf("reversedJSON: %v", err)
		}
		delim, ok := tok.(json.Delim)
		if !ok {
			text, _ := json.Marshal(tok) // escapes <, >, & differently from the original
			return &node{text: text}
		}
		n := &node{open: byte(delim)}
		for d.More() {
			if delim == '{' {
				kt, _ := d.Token()
				n.keys = append(n.keys, kt.(string))
			}
			n.items = append(n.items, parse())
		}
		_, _ = d.Token()
		return n
	}
	var out bytes.Buffer
	var write func(n *node)
	write = func(n *node) {
		switch n.open {
		case 0:
			out.Write(n.text)
		case '[':
			out.WriteString("[ ")
			for i, it := range n.items {
				if i > 0 {
					out.WriteString(" ,\n")
				}
				write(it)
			}
			out.WriteString(" ]")
		default:
			out.WriteString("{\n")
			for i := len(n.items) - 1; i >= 0; i-- {
				kb, _ := json.Marshal(n.keys[i])
				out.Write(kb)
				out.WriteString(" :\t")
				write(n.items[i])
				if i > 0 {
					out.WriteString(" , ")
				}
			}
			out.WriteString("\n}")
		}
	}
	write(parse())
	return out.Bytes()
}

func decodeNumbers(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

func FuzzCanonicalJSON(f *testing.F) {
	seeds := [][2]string{
		{`{"a":1,"b":[true,null,"x"]}`, `{"b":[true,null,"x"],"a":1}`},
		{`{"a":{"y":1,"x":2}}`, `{"a":{"x":2,"y":1}}`},
		{`"\u0041"`, `"A"`},
		{`{"a":1,"a":2}`, `{"a":2}`},
		{`[1,1.0,1e0]`, `[1,1,1]`},
		{`"\ud83d\ude00"`, `"😀"`},
		{`not json`, `{}`},
		{"\"\xff\"", `"\ufffd"`},
		{`{"<>&":"\u2028"}`, `{"\u003c\u003e\u0026":"` + "\u2028" + `"}`},
	}
	for _, s := range seeds {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ca, okA := canonicalJSON(a)
		cb, okB := canonicalJSON(b)
		if okA {
			// Equal for re-indented and reordered forms of the same value.
			var compact, indented bytes.Buffer
			if err := json.Compact(&compact, a); err != nil {
				t.Fatalf("canonicalised %q but json.Compact fails: %v", a, err)
			}
			_ = json.Indent(&indented, a, "\t", "   ")
			for _, alt := range [][]byte{compact.Bytes(), indented.Bytes(), reversedJSON(t, a)} {
				if c, ok := canonicalJSON(alt); !ok || !bytes.Equal(c, ca) {
					t.Fatalf("%q canonicalises to %q but its re-formatted form %q to %q (ok=%v)", a, ca, alt, c, ok)
				}
			}
			// The canonical form is a fixed point.
			if c, ok := canonicalJSON(ca); !ok || !bytes.Equal(c, ca) {
				t.Fatalf("canonical form %q is not canonical: %q", ca, c)
			}
		}
		// Different values never share a canonical form.
		if okA && okB {
			va, errA := decodeNumbers(a)
			vb, errB := decodeNumbers(b)
			if errA != nil || errB != nil {
				t.Fatalf("canonicalised but does not decode: %v / %v", errA, errB)
			}
			if eq := reflect.DeepEqual(va, vb); eq != bytes.Equal(ca, cb) {
				t.Fatalf("%q and %q: values equal=%v but canonical forms %q and %q", a, b, eq, ca, cb)
			}
		}
		// The fingerprint never panics and separates canonical from raw bodies.
		r := httptest.NewRequest("POST", "/x", nil)
		if (CanonicalJSON(r, a) == CanonicalJSON(r, b)) != ((okA && okB && bytes.Equal(ca, cb)) || (!okA && !okB && bytes.Equal(a, b))) {
			t.Fatalf("CanonicalJSON(%q) vs (%q) disagree with the canonical forms", a, b)
		}
	})
}

// TestCanonicalJSONDeepNesting pins the fix for quadratic copying: each
// nesting level used to copy its whole subtree into its parent.
func TestCanonicalJSONDeepNesting(t *testing.T) {
	t.Parallel()
	const depth = 9000
	a := strings.Repeat(`{"b":2,"a":`, depth) + `"` + strings.Repeat("x", 1<<16) + `"` + strings.Repeat("}", depth)
	b := strings.Repeat(`{"a":`, depth) + `"` + strings.Repeat("x", 1<<16) + `"` + strings.Repeat(`,"b":2}`, depth)
	ca, okA := canonicalJSON([]byte(a))
	cb, okB := canonicalJSON([]byte(b))
	if !okA || !okB || !bytes.Equal(ca, cb) {
		t.Fatalf("deeply nested reordered objects: ok %v %v, equal %v", okA, okB, bytes.Equal(ca, cb))
	}
}

func BenchmarkFingerprint(b *testing.B) {
	r := httptest.NewRequest("POST", "/payments?x=1", nil)
	small := []byte(`{"customer":"ada","amount":1000,"currency":"EUR","meta":{"b":1,"a":[1,2,3]}}`)
	deep := []byte(strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000))
	for _, c := range []struct {
		name string
		f    Fingerprint
		body []byte
	}{
		{"exact_small", ExactBody, small},
		{"canonical_small", CanonicalJSON, small},
		{"canonical_deep", CanonicalJSON, deep},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				c.f(r, c.body)
			}
		})
	}
}
