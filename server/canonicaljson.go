package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"unicode/utf8"
)

// errNotCanonical stops canonicalisation of a body that has no canonical form.
var errNotCanonical = errors.New("no canonical form")

// canonicalJSON returns the canonical form of body if body is exactly one
// valid JSON value in valid UTF-8 with no duplicate object keys and no
// surrogate escapes (\uD800-\uDFFF, which Go's decoder folds into U+FFFD and
// so would make different strings equal). Objects get their members sorted by
// key (bytewise), whitespace is dropped, strings are re-escaped minimally
// (only ", \ and control characters), numbers keep their literal text.
//
// It parses into a tree and writes the tree once, so its cost is linear in
// the body (plus sorting), whatever the nesting depth.
func canonicalJSON(body []byte) ([]byte, bool) {
	if !utf8.Valid(body) || !json.Valid(body) || hasSurrogateEscape(body) {
		return nil, false
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	v, err := parseJSON(d)
	if err != nil {
		return nil, false
	}
	return v.appendTo(make([]byte, 0, len(body))), true
}

// jsonValue is a parsed JSON value: a scalar's canonical text, an array's
// elements or an object's members (sorted by key once parsed).
type jsonValue struct {
	scalar  string
	isArray bool
	isObj   bool
	elems   []*jsonValue
	members []member
}

type member struct {
	key   string
	value *jsonValue
}

// parseJSON parses the next value of d.
func parseJSON(d *json.Decoder) (*jsonValue, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			v := &jsonValue{isArray: true}
			for d.More() {
				e, err := parseJSON(d)
				if err != nil {
					return nil, err
				}
				v.elems = append(v.elems, e)
			}
			_, err := d.Token() // ']'
			return v, err
		case '{':
			v := &jsonValue{isObj: true}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				key, ok := kt.(string)
				if !ok {
					return nil, errNotCanonical
				}
				e, err := parseJSON(d)
				if err != nil {
					return nil, err
				}
				v.members = append(v.members, member{key, e})
			}
			if _, err := d.Token(); err != nil { // '}'
				return nil, err
			}
			slices.SortFunc(v.members, func(a, b member) int { return strings.Compare(a.key, b.key) })
			for i := 1; i < len(v.members); i++ {
				if v.members[i].key == v.members[i-1].key {
					return nil, errNotCanonical // duplicate key: its meaning depends on the parser
				}
			}
			return v, nil
		}
		return nil, errNotCanonical
	case string:
		return &jsonValue{scalar: string(appendJSONString(nil, t))}, nil
	case json.Number:
		return &jsonValue{scalar: string(t)}, nil
	case bool:
		if t {
			return &jsonValue{scalar: "true"}, nil
		}
		return &jsonValue{scalar: "false"}, nil
	case nil:
		return &jsonValue{scalar: "null"}, nil
	}
	return nil, errNotCanonical
}

// appendTo appends v's canonical text to out.
func (v *jsonValue) appendTo(out []byte) []byte {
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
			out = appendJSONString(out, m.key)
			out = append(out, ':')
			out = m.value.appendTo(out)
		}
		return append(out, '}')
	}
	return append(out, v.scalar...)
}

// appendJSONString appends s (valid UTF-8) as a JSON string, escaping only the
// characters JSON requires: the result is unique for each s.
func appendJSONString(out []byte, s string) []byte {
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
func hasSurrogateEscape(body []byte) bool {
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
