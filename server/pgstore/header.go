package pgstore

import (
	"net/http"
	"slices"
)

// encodeHeader flattens h into two parallel bytea arrays, one element per value,
// so repeated values keep their order and any byte survives. A name whose value
// list is empty is kept as one NULL value. A nil h is stored as NULL arrays.
func encodeHeader(h http.Header) (names, values [][]byte) {
	if h == nil {
		return nil, nil
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys) // deterministic rows
	names, values = [][]byte{}, [][]byte{}
	for _, k := range keys {
		vs := h[k]
		if len(vs) == 0 {
			names, values = append(names, []byte(k)), append(values, nil)
			continue
		}
		for _, v := range vs {
			names, values = append(names, []byte(k)), append(values, append([]byte{}, v...))
		}
	}
	return names, values
}

// decodeHeader reverses encodeHeader. The arrays come from the store's own
// writes; a length mismatch (a row edited by hand) is reported as not ok.
func decodeHeader(names, values [][]byte, null bool) (h http.Header, ok bool) {
	if null {
		return nil, true
	}
	if len(names) != len(values) {
		return nil, false
	}
	h = make(http.Header, len(names))
	for i, n := range names {
		k := string(n)
		if values[i] == nil {
			if _, seen := h[k]; !seen {
				h[k] = []string{}
			}
			continue
		}
		h[k] = append(h[k], string(values[i]))
	}
	return h, true
}
