package server

import (
	"bytes"
	"strings"
	"testing"
)

// canonicalCases are bodies on which the scanner and the reference must
// agree: every branch of both, and the edges of the validity checks.
var canonicalCases = []string{
	`{"a":1,"b":[true,null,"x"]}`, "{ \"b\" : [ true , null , \"x\" ] ,\n\t\"a\" : 1 }\n",
	`{"a":{"y":1,"x":2}}`, `"A"`, `"\u0041"`, `"\/"`, `[]`, ` [ ] `, `{}`, ` { } `,
	`{"a":1,"a":1}`, `{"a":1,"\u0061":2}`, `{"b":{"a":1,"a":2}}`, `[{"a":1,"a":2}]`,
	`not json`, `"\ud800"`, `"\ud83d\ude00"`, `"\\ud800"`, "\"\xff\"", `{} {}`, ``, ` `,
	`0`, `-0`, `1.0`, `1e0`, `1E+2`, `-12.5e-3`, `true`, `false`, `null`, ` null `,
	`"\b\f\n\r\t\"\\\/"`, `"\u0000\u001f\u0020\u007f\u00e9\u2028\uffff"`, "\"\u2028\x7f é\"",
	`{"\u0000":0,"":1," ":2,"\t":3,"é":4,"e":5,"\u00e9":6}`,
	`{"<>&":"\u003c\u003e\u0026"}`, `{"z":[{"b":[],"a":{}}],"a":[[[]]]}`,
	`[1,"1",[1],{"1":1}]`, `{"a":"\"","b":"\\","c":"\u005c"}`,
	`{"a":1,}`, `[1,]`, `{"a"}`, `{"a":01}`, `"unterminated`, `"\x"`, `"\u12"`,
	"\"tab\tin string\"", "{\"a\":1}\x00",
}

func TestCanonicalJSONMatchesReference(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`{"b":2,"a":[`, 300) + `"x"` + strings.Repeat(`]}`, 300)
	tooDeep := strings.Repeat(`[`, 10001) + strings.Repeat(`]`, 10001)
	for _, body := range append(canonicalCases, deep, tooDeep) {
		checkCanonicalAgainstReference(t, []byte(body))
	}
}

func checkCanonicalAgainstReference(t *testing.T, body []byte) {
	t.Helper()
	want, wantOK := canonicalJSONRef(body)
	got, gotOK := canonicalJSON(body)
	if gotOK != wantOK || !bytes.Equal(got, want) {
		t.Fatalf("canonicalJSON(%q) = %q, %v; the reference gives %q, %v", body, got, gotOK, want, wantOK)
	}
	// Appending to a buffer that holds other bytes gives the same result.
	prefix := []byte("prefix")
	app, appOK := appendCanonicalJSON(prefix, body)
	if appOK != wantOK || (wantOK && !bytes.Equal(app[len(prefix):], want)) || !bytes.Equal(app[:len(prefix)], prefix) {
		t.Fatalf("appendCanonicalJSON(%q) = %q, %v; want prefix then %q, %v", body, app, appOK, want, wantOK)
	}
}

// FuzzCanonicalJSONDifferential compares the scanner with the reference
// implementation it replaced, on arbitrary bodies.
func FuzzCanonicalJSONDifferential(f *testing.F) {
	for _, c := range canonicalCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkCanonicalAgainstReference(t, body)
	})
}

func BenchmarkCanonicalJSON(b *testing.B) {
	small := []byte(`{"customer":"ada","amount":1000,"currency":"EUR","meta":{"b":1,"a":[1,2,3]}}`)
	escaped := []byte(`{"n\u00e4me":"Jos\u00e9 \"the\" \\ best","tags":["a\tb","c\nd"],"z":null,"a":true}`)
	for _, c := range []struct {
		name string
		body []byte
	}{{"small", small}, {"escaped", escaped}} {
		for _, impl := range []struct {
			name string
			f    func([]byte) ([]byte, bool)
		}{{"reference", canonicalJSONRef}, {"scanner", canonicalJSON}} {
			b.Run(c.name+"/"+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(c.body)))
				for b.Loop() {
					impl.f(c.body)
				}
			})
		}
	}
}
