package server

// The canonical JSON encoder as it was before the hand-written scanner
// (canonicaljson.go), kept verbatim as the reference the differential fuzz
// test compares the new one with. Only the names changed.

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"unicode/utf8"
)

// errNotCanonicalRef stops canonicalisation of a body that has no canonical form.
var errNotCanonicalRef = errors.New("no canonical form")

// canonicalJSON returns the canonical form of body if body is exactly one
// valid JSON value in valid UTF-8 with no duplicate object keys and no
// surrogate escapes (\uD800-\uDFFF, which Go's decoder folds into U+FFFD and
// so would make different strings equal). Objects get their members sorted by
// key (bytewise), whitespace is dropped, strings are re-escaped minimally
// (only ", \ and control characters), numbers keep their literal text.
//
// It parses into a tree and writes the tree once, so its cost is linear in
// the body (plus sorting), whatever the nesting depth.
func canonicalJSONRef(body []byte) ([]byte, bool) {
	if !utf8.Valid(body) || !json.Valid(body) || hasSurrogateEscapeRef(body) {
		return nil, false
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	v, err := parseJSONRef(d)
	if err != nil {
		return nil, false
	}
	return v.appendTo(make([]byte, 0, len(body))), true
}

// jsonValueRef is a parsed JSON value: a scalar's canonical text, an array's
// elements or an object's members (sorted by key once parsed).
type jsonValueRef struct {
	scalar  string
	isArray bool
	isObj   bool
	elems   []*jsonValueRef
	members []memberRef
}

type memberRef struct {
	key   string
	value *jsonValueRef
}

// parseJSON parses the next value of d.
func parseJSONRef(d *json.Decoder) (*jsonValueRef, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			v := &jsonValueRef{isArray: true}
			for d.More() {
				e, err := parseJSONRef(d)
				if err != nil {
					return nil, err
				}
				v.elems = append(v.elems, e)
			}
			_, err := d.Token() // ']'
			return v, err
		case '{':
			v := &jsonValueRef{isObj: true}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				key, ok := kt.(string)
				if !ok {
					return nil, errNotCanonicalRef
				}
				e, err := parseJSONRef(d)
				if err != nil {
					return nil, err
				}
				v.members = append(v.members, memberRef{key, e})
			}
			if _, err := d.Token(); err != nil { // '}'
				return nil, err
			}
			slices.SortFunc(v.members, func(a, b memberRef) int { return strings.Compare(a.key, b.key) })
			for i := 1; i < len(v.members); i++ {
				if v.members[i].key == v.members[i-1].key {
					return nil, errNotCanonicalRef // duplicate key: its meaning depends on the parser
				}
			}
			return v, nil
		}
		return nil, errNotCanonicalRef
	case string:
		return &jsonValueRef{scalar: string(appendJSONStringRef(nil, t))}, nil
	case json.Number:
		return &jsonValueRef{scalar: string(t)}, nil
	case bool:
		if t {
			return &jsonValueRef{scalar: "true"}, nil
		}
		return &jsonValueRef{scalar: "false"}, nil
	case nil:
		return &jsonValueRef{scalar: "null"}, nil
	}
	return nil, errNotCanonicalRef
}

// appendTo appends v's canonical text to out.
func (v *jsonValueRef) appendTo(out []byte) []byte {
	switch {
	case v.isArray:
		out = append(out, '[')
		for i, e := range v.elems {
			if i > 0 {
				out = append(out, ',')
			}
			out = e.appendTo(out)
		}
		return append(out, ']')
	case v.isObj:
		out = append(out, '{')
		for i, m := range v.members {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendJSONStringRef(out, m.key)
			out = append(out, ':')
			out = m.value.appendTo(out)
		}
		return append(out, '}')
	}
	return append(out, v.scalar...)
}

// appendJSONString appends s (valid UTF-8) as a JSON string, escaping only the
// characters JSON requires: the result is unique for each s.
func appendJSONStringRef(out []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	out = append(out, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			out = append(out, '\\', c)
		case c < 0x20:
			out = append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			out = append(out, c)
		}
	}
	return append(out, '"')
}

// hasSurrogateEscape reports whether body contains a \u escape of a UTF-16
// surrogate (D800 to DFFF). It may also match an escaped backslash followed by
// such text, which only makes the fingerprint fall back to the exact bytes.
func hasSurrogateEscapeRef(body []byte) bool {
	for i := bytes.Index(body, []byte(`\u`)); i >= 0; {
		rest := body[i+2:]
		if len(rest) >= 2 && (rest[0] == 'd' || rest[0] == 'D') {
			switch rest[1] {
			case '8', '9', 'a', 'b', 'c', 'd', 'e', 'f', 'A', 'B', 'C', 'D', 'E', 'F':
				return true
			}
		}
		j := bytes.Index(rest, []byte(`\u`))
		if j < 0 {
			return false
		}
		i += 2 + j
	}
	return false
}
