package server

import (
	"bytes"
	"encoding/json"
	"slices"
	"sync"
	"unicode/utf8"
)

// canonicalJSON returns the canonical form of body if body is exactly one
// valid JSON value in valid UTF-8 with no duplicate object keys and no
// surrogate escapes (\uD800-\uDFFF, which Go's decoder folds into U+FFFD and
// so would make different strings equal). Objects get their members sorted by
// key (bytewise, on the unescaped keys), whitespace is dropped, strings are
// re-escaped minimally (only ", \ and control characters, as \u00XX), numbers
// keep their literal text.
func canonicalJSON(body []byte) ([]byte, bool) {
	c := getCanonicalizer()
	defer putCanonicalizer(c)
	out, ok := c.appendCanonical(nil, body)
	return out, ok
}

// appendCanonicalJSON is canonicalJSON appending to dst: with a reused dst it
// does not allocate.
func appendCanonicalJSON(dst, body []byte) ([]byte, bool) {
	c := getCanonicalizer()
	defer putCanonicalizer(c)
	return c.appendCanonical(dst, body)
}

// A canonicalizer holds the scratch space of one canonicalisation. The body
// is validated first (UTF-8, JSON, no surrogate escapes), so the scanner
// below never meets a syntax error. It indexes the value in one pass (a
// node per value, a member per object member, children listed after their
// container is closed), sorts each object's members, then writes the tree
// once: linear in the body, plus sorting, whatever the nesting depth.
type canonicalizer struct {
	in      []byte
	nodes   []cjNode
	members []cjMember // every object's members, each object's contiguous
	elems   []int32    // every array's element nodes, each array's contiguous
	keys    []byte     // unescaped keys that had escapes
	// Stacks of the members and elements of the containers being parsed.
	memberStack []cjMember
	elemStack   []int32
}

// A cjNode is one JSON value.
type cjNode struct {
	kind byte // '{', '[', '"' or 0 for a number or literal
	// Scalars: the value's text in the input, quotes included. Containers:
	// the range of their members or elements.
	start, end int
}

// A cjMember is one object member.
type cjMember struct {
	// key is the key's text between its quotes; unescaped, when it had
	// escapes, is its range in canonicalizer.keys (else start == end == -1).
	keyStart, keyEnd int
	unStart, unEnd   int
	value            int32
}

var canonicalizers = sync.Pool{New: func() any { return new(canonicalizer) }}

func getCanonicalizer() *canonicalizer { return canonicalizers.Get().(*canonicalizer) }

// putCanonicalizer returns c to the pool unless a large body grew its
// buffers: those are left to the garbage collector.
func putCanonicalizer(c *canonicalizer) {
	const maxKept = 4096
	if cap(c.nodes) > maxKept || cap(c.members) > maxKept || cap(c.elems) > maxKept ||
		cap(c.keys) > 16*maxKept || cap(c.memberStack) > maxKept || cap(c.elemStack) > maxKept {
		return
	}
	c.in = nil
	canonicalizers.Put(c)
}

func (c *canonicalizer) appendCanonical(dst, body []byte) ([]byte, bool) {
	if !utf8.Valid(body) || !json.Valid(body) || hasSurrogateEscape(body) {
		return dst, false
	}
	c.in = body
	c.nodes, c.members, c.elems, c.keys = c.nodes[:0], c.members[:0], c.elems[:0], c.keys[:0]
	c.memberStack, c.elemStack = c.memberStack[:0], c.elemStack[:0]
	root, _ := c.parse(skipSpace(body, 0))
	if root < 0 {
		return dst, false
	}
	if dst == nil {
		dst = make([]byte, 0, len(body))
	}
	return c.write(dst, root), true
}

// parse indexes the value that starts at in[i] and returns its node and the
// offset just past it; node -1 means an object with a duplicate key.
func (c *canonicalizer) parse(i int) (int32, int) {
	in := c.in
	n := int32(len(c.nodes))
	switch in[i] {
	case '{':
		c.nodes = append(c.nodes, cjNode{kind: '{'})
		base := len(c.memberStack)
		i = skipSpace(in, i+1)
		if in[i] != '}' {
			for {
				m := cjMember{keyStart: i + 1, unStart: -1, unEnd: -1}
				var escaped bool
				m.keyEnd, escaped = stringEnd(in, i+1)
				if escaped {
					m.unStart = len(c.keys)
					c.keys = appendUnescaped(c.keys, in[m.keyStart:m.keyEnd])
					m.unEnd = len(c.keys)
				}
				i = skipSpace(in, skipSpace(in, m.keyEnd+1)+1) // past the ':'
				var v int32
				if v, i = c.parse(i); v < 0 {
					return -1, i
				}
				m.value = v
				c.memberStack = append(c.memberStack, m)
				if i = skipSpace(in, i); in[i] == '}' {
					break
				}
				i = skipSpace(in, i+1) // past the ','
			}
		}
		first := len(c.members)
		c.members = append(c.members, c.memberStack[base:]...)
		c.memberStack = c.memberStack[:base]
		ms := c.members[first:]
		slices.SortFunc(ms, func(a, b cjMember) int { return bytes.Compare(c.key(a), c.key(b)) })
		for j := 1; j < len(ms); j++ {
			if bytes.Equal(c.key(ms[j-1]), c.key(ms[j])) {
				return -1, i // duplicate key: its meaning depends on the parser
			}
		}
		c.nodes[n].start, c.nodes[n].end = first, len(c.members)
		return n, i + 1
	case '[':
		c.nodes = append(c.nodes, cjNode{kind: '['})
		base := len(c.elemStack)
		i = skipSpace(in, i+1)
		if in[i] != ']' {
			for {
				var v int32
				if v, i = c.parse(i); v < 0 {
					return -1, i
				}
				c.elemStack = append(c.elemStack, v)
				if i = skipSpace(in, i); in[i] == ']' {
					break
				}
				i = skipSpace(in, i+1) // past the ','
			}
		}
		first := len(c.elems)
		c.elems = append(c.elems, c.elemStack[base:]...)
		c.elemStack = c.elemStack[:base]
		c.nodes[n].start, c.nodes[n].end = first, len(c.elems)
		return n, i + 1
	case '"':
		end, _ := stringEnd(in, i+1)
		c.nodes = append(c.nodes, cjNode{kind: '"', start: i, end: end + 1})
		return n, end + 1
	}
	// A number, true, false or null: up to the next delimiter.
	j := i + 1
	for j < len(in) && !isDelimiter(in[j]) {
		j++
	}
	c.nodes = append(c.nodes, cjNode{start: i, end: j})
	return n, j
}

// key returns m's unescaped key.
func (c *canonicalizer) key(m cjMember) []byte {
	if m.unStart >= 0 {
		return c.keys[m.unStart:m.unEnd]
	}
	return c.in[m.keyStart:m.keyEnd]
}

// write appends node n's canonical text to out.
func (c *canonicalizer) write(out []byte, n int32) []byte {
	nd := c.nodes[n]
	switch nd.kind {
	case '{':
		out = append(out, '{')
		for j, m := range c.members[nd.start:nd.end] {
			if j > 0 {
				out = append(out, ',')
			}
			out = appendCanonicalString(out, c.in[m.keyStart:m.keyEnd])
			out = append(out, ':')
			out = c.write(out, m.value)
		}
		return append(out, '}')
	case '[':
		out = append(out, '[')
		for j, e := range c.elems[nd.start:nd.end] {
			if j > 0 {
				out = append(out, ',')
			}
			out = c.write(out, e)
		}
		return append(out, ']')
	case '"':
		return appendCanonicalString(out, c.in[nd.start+1:nd.end-1])
	}
	return append(out, c.in[nd.start:nd.end]...)
}

func isDelimiter(b byte) bool {
	switch b {
	case ',', '}', ']', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// skipSpace returns the offset of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(in []byte, i int) int {
	for i < len(in) {
		switch in[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// stringEnd returns the offset of the closing quote of the string whose
// content starts at in[i], and whether the string has escapes.
func stringEnd(in []byte, i int) (int, bool) {
	escaped := false
	for {
		j := bytes.IndexAny(in[i:], `"\`)
		i += j
		if in[i] == '"' {
			return i, escaped
		}
		escaped = true
		i += 2 // the backslash and the escaped character (\uXXXX: its hex digits are plain bytes)
	}
}

// appendUnescaped appends the bytes a valid JSON string's content (raw, the
// text between the quotes) stands for. Surrogate escapes were ruled out.
func appendUnescaped(out, raw []byte) []byte {
	for len(raw) > 0 {
		j := bytes.IndexByte(raw, '\\')
		if j < 0 {
			return append(out, raw...)
		}
		out = append(out, raw[:j]...)
		var r rune
		r, raw = unescape(raw[j:])
		out = utf8.AppendRune(out, r)
	}
	return out
}

// appendCanonicalString appends the string whose JSON content is raw as a
// canonical JSON string: only ", \ and the control characters are escaped,
// the latter as \u00XX, so that each string has one form.
func appendCanonicalString(out, raw []byte) []byte {
	const hexDigits = "0123456789abcdef"
	out = append(out, '"')
	for len(raw) > 0 {
		j := bytes.IndexByte(raw, '\\')
		if j < 0 {
			out = append(out, raw...) // valid JSON: no quote and no control character is left raw
			break
		}
		out = append(out, raw[:j]...)
		var r rune
		r, raw = unescape(raw[j:])
		switch {
		case r == '"' || r == '\\':
			out = append(out, '\\', byte(r))
		case r < 0x20:
			out = append(out, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xf])
		default:
			out = utf8.AppendRune(out, r)
		}
	}
	return append(out, '"')
}

// unescape decodes the escape sequence at the start of s (a backslash, valid)
// and returns the character and the rest of s.
func unescape(s []byte) (rune, []byte) {
	switch s[1] {
	case 'b':
		return '\b', s[2:]
	case 'f':
		return '\f', s[2:]
	case 'n':
		return '\n', s[2:]
	case 'r':
		return '\r', s[2:]
	case 't':
		return '\t', s[2:]
	case 'u':
		var r rune
		for _, h := range s[2:6] {
			r <<= 4
			switch {
			case h <= '9':
				r |= rune(h - '0')
			case h >= 'a':
				r |= rune(h - 'a' + 10)
			default:
				r |= rune(h - 'A' + 10)
			}
		}
		return r, s[6:]
	}
	return rune(s[1]), s[2:] // " \ /
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
