package memstore

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/idemkit/idem/server"
)

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("v", 300) // lengths past one uvarint byte
	tests := []struct {
		name string
		resp *server.Response
	}{
		{"nil header and body", &server.Response{Status: 204}},
		{"empty header and body", &server.Response{Status: 200, Header: http.Header{}, Body: []byte{}}},
		{"typical", &server.Response{Status: 201,
			Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/p/1"}},
			Body:   []byte(`{"id":"p_1"}` + "\n")}},
		{"repeated, empty and non-canonical", &server.Response{Status: 200,
			Header: http.Header{"X-Multi": {"one", "two", ""}, "x-noncanon": {"kept as is"}, "Etag": {`"v1"`}},
			Body:   []byte{0, 1, 2, 0xff, '\n', 0}}},
		{"field with nil values", &server.Response{Status: 200, Header: http.Header{"X-Nil": nil, "A": {"a"}}}},
		{"field with empty values", &server.Response{Status: 200, Header: http.Header{"X-Empty": {}, "B": {"b"}}}},
		{"long names, values and body", &server.Response{Status: 200,
			Header: http.Header{long: {long, "", long}}, Body: []byte(strings.Repeat("b", 70000))}},
		{"binary-unsafe bytes in header", &server.Response{Status: 200,
			Header: http.Header{"\x00\x80": {"\x00\xff\x01"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var r record
			r.set(tt.resp)
			got := r.response()
			if !reflect.DeepEqual(got, tt.resp) {
				t.Fatalf("round trip = %#v, want %#v", got, tt.resp)
			}
			if again := r.response(); !reflect.DeepEqual(again, tt.resp) {
				t.Fatalf("second copy = %#v, want %#v", again, tt.resp)
			}
		})
	}
}

// TestRecordSharesNothing: neither the response a record was made from nor
// a copy handed out later can change what the record replays.
func TestRecordSharesNothing(t *testing.T) {
	t.Parallel()
	orig := sampleResponse()
	var r record
	r.set(orig)
	orig.Body[0] = 'X'
	orig.Header["X-Multi"][0] = "changed"
	orig.Header.Set("X-New", "added")

	out := r.response()
	out.Body[1] = 'Y'
	out.Header["X-Multi"][1] = "scribbled"
	out.Header["X-Multi"] = append(out.Header["X-Multi"], "appended")
	delete(out.Header, "Content-Type")

	if got := r.response(); !reflect.DeepEqual(got, sampleResponse()) {
		t.Fatalf("record changed: %#v", got)
	}
}

// FuzzRecord checks the round trip on headers and bodies built from
// arbitrary bytes.
func FuzzRecord(f *testing.F) {
	f.Add(201, "Content-Type\x00application/json\x00Location\x00/p/1", []byte("{}"), false)
	f.Add(200, "", []byte(nil), true)
	f.Add(500, "X\x00\x00X\x00b\x00\xff\x00", []byte{0}, false)
	f.Fuzz(func(t *testing.T, status int, fields string, body []byte, nilHeader bool) {
		resp := &server.Response{Status: status, Body: body}
		if !nilHeader {
			resp.Header = http.Header{}
			parts := strings.Split(fields, "\x00")
			for i := 0; i+1 < len(parts); i += 2 {
				k, v := parts[i], parts[i+1]
				switch v {
				case "nil":
					resp.Header[k] = nil
				case "empty":
					resp.Header[k] = []string{}
				default:
					resp.Header[k] = append(resp.Header[k], v)
				}
			}
		}
		var r record
		r.set(resp)
		if got := r.response(); !reflect.DeepEqual(got, resp) {
			t.Fatalf("round trip = %#v, want %#v", got, resp)
		}
	})
}
