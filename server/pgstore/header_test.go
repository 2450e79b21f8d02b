package pgstore

import (
	"errors"
	"net/http"
	"reflect"
	"testing"
)

func TestHeaderEncoding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		h    http.Header
	}{
		{"nil", nil},
		{"empty", http.Header{}},
		{"repeated values keep their order", http.Header{"Link": {"b", "a", "b"}}},
		{"empty value and empty list", http.Header{"X-A": {""}, "X-B": {}}},
		{"any bytes", http.Header{"X-Bin": {"\x00\xff\xfe", "caf\xe9"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			names, values := encodeHeader(tt.h)
			got, ok := decodeHeader(names, values, names == nil && values == nil)
			if !ok || !reflect.DeepEqual(got, tt.h) {
				t.Fatalf("round trip of %#v = %#v, %v", tt.h, got, ok)
			}
		})
	}
}

func TestRecordWithMismatchedHeaderArraysIsAnError(t *testing.T) {
	t.Parallel()
	status := int32(200)
	r := record{fingerprint: "fp", state: "done", status: &status, headerNames: [][]byte{[]byte("A")}, headerValues: [][]byte{}}
	if _, err := r.result("fp"); !errors.Is(err, errBadRecord) {
		t.Fatalf("result = %v; want errBadRecord", err)
	}
}

// FuzzHeaderEncoding: any header of names and values survives the encoding.
func FuzzHeaderEncoding(f *testing.F) {
	f.Add("Content-Type", "application/json", "Link", "</a>", true)
	f.Add("X", "", "X", "\x00\xff", false)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, emptyList bool) {
		h := http.Header{}
		h[k1] = append(h[k1], v1)
		h[k2] = append(h[k2], v2)
		if emptyList {
			h[k1+"-empty"] = []string{}
			if k1+"-empty" == k2 {
				return // both set k2: not one header
			}
		}
		names, values := encodeHeader(h)
		got, ok := decodeHeader(names, values, false)
		if !ok || !reflect.DeepEqual(got, h) {
			t.Fatalf("round trip of %#v = %#v, %v", h, got, ok)
		}
	})
}
