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
func canonicalJSON(body []byte) ([]byte, bool) {
	if !utf8.Valid(body) || !json.Valid(body) || hasSurrogateEscape(body) {
		return nil, false
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	out, err := canonValue(d, make([]byte, 0, len(body)))
	if err != nil {
		return nil, false
	}
	return out, true
}

// canonValue appends the canonical form of the next value of d to out.
func canonValue(d *json.Decoder, out []byte) ([]byte, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			return canonArray(d, out)
		}
		if t == '{' {
			return canonObject(d, out)
		}
		return nil, errNotCanonical
	case string:
		return appendJSONString(out, t), nil
	case json.Number:
		return append(out, t...), nil
	case bool:
		if t {
			return append(out, "true"...), nil
		}
		return append(out, "false"...), nil
	case nil:
		return append(out, "null"...), nil
	}
	return nil, errNotCanonical
}

func canonArray(d *json.Decoder, out []byte) ([]byte, error) {
	out = append(out, '[')
	for i := 0; d.More(); i++ {
		if i > 0 {
			out = append(out, ',')
		}
		var err error
		if out, err = canonValue(d, out); err != nil {
			return nil, err
		}
	}
	if _, err := d.Token(); err != nil { // ']'
		return nil, err
	}
	return append(out, ']'), nil
}

type member struct {
	key   string
	value []byte
}

func canonObject(d *json.Decoder, out []byte) ([]byte, error) {
	var ms []member
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errNotCanonical
		}
		v, err := canonValue(d, nil)
		if err != nil {
			return nil, err
		}
		ms = append(ms, member{key, v})
	}
	if _, err := d.Token(); err != nil { // '}'
		return nil, err
	}
	slices.SortFunc(ms, func(a, b member) int { return strings.Compare(a.key, b.key) })
	out = append(out, '{')
	for i, m := range ms {
		if i > 0 {
			if ms[i-1].key == m.key {
				return nil, errNotCanonical // duplicate key: meaning depends on the parser
			}
			out = append(out, ',')
		}
		out = appendJSONString(out, m.key)
		out = append(out, ':')
		out = append(out, m.value...)
	}
	return append(out, '}'), nil
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
