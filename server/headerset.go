package server

import "net/http"

// headerSet is the allow-list of recorded headers: canonical names, a handful
// of them, so a linear scan of a slice is cheaper than hashing into a map.
type headerSet []string

// has reports whether name, as written, is in the set.
func (s headerSet) has(name string) bool {
	for _, n := range s {
		if n == name {
			return true
		}
	}
	return false
}

// holdsAll reports whether every key of h, as written, is in the set. It
// looks the set's names up in h rather than ranging over h: for a few names
// and a small map that is cheaper.
func (s headerSet) holdsAll(h http.Header) bool {
	if len(h) > len(s) {
		return false
	}
	found := 0
	for _, n := range s {
		if _, ok := h[n]; ok {
			found++
		}
	}
	return found == len(h)
}

// with returns a new set holding s and names (canonical), without duplicates.
func (s headerSet) with(names ...string) headerSet {
	out := make(headerSet, len(s), len(s)+len(names))
	copy(out, s)
	for _, n := range names {
		if !out.has(n) {
			out = append(out, n)
		}
	}
	return out
}
