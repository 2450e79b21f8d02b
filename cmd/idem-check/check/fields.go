package check

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// maxFields bounds the fields the mismatch-field rows change one at a time:
// two requests each.
const maxFields = 32

// queryVariant is the query parameter the mismatch-query row adds.
const queryVariant = "idem_check_variant=1"

// A field is one top-level member of a JSON object body: its name and where
// its value's bytes are.
type field struct {
	name       string
	start, end int // body[start:end] is the value
}

// topLevelFields returns the members of body, a JSON object, in the order
// they appear; nil when body is not one.
func topLevelFields(body []byte) []field {
	d := json.NewDecoder(bytes.NewReader(body))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var out []field
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return nil
		}
		name, _ := t.(string)
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return nil
		}
		end := int(d.InputOffset())
		out = append(out, field{name: name, start: end - len(v), end: end})
	}
	if t, err := d.Token(); err != nil || t != json.Delim('}') {
		return nil
	}
	return out
}

// withFieldChanged returns body with f's value, and nothing else, changed to
// another value of the same JSON type.
func withFieldChanged(body []byte, f field) []byte {
	v := otherValue(body[f.start:f.end])
	out := make([]byte, 0, len(body)+len(v))
	out = append(out, body[:f.start]...)
	out = append(out, v...)
	return append(out, body[f.end:]...)
}

// otherValue returns a JSON value of v's type that differs from v: a number
// plus one, a string with its last letter or digit moved on (the same
// length), the other boolean, an object or array with one more member.
func otherValue(v []byte) []byte {
	switch v[0] {
	case '"':
		var s string
		if json.Unmarshal(v, &s) != nil {
			return []byte(`"idem-check"`)
		}
		out, _ := json.Marshal(otherString(s))
		return out
	case 't':
		return []byte("false")
	case 'f':
		return []byte("true")
	case 'n':
		return []byte("1")
	case '{':
		inner := bytes.TrimSpace(v[1 : len(v)-1])
		if len(inner) == 0 {
			return []byte(`{"idem_check_variant":1}`)
		}
		return fmt.Appendf(nil, `{%s,"idem_check_variant":1}`, inner)
	case '[':
		inner := bytes.TrimSpace(v[1 : len(v)-1])
		if len(inner) == 0 {
			return []byte(`[0]`)
		}
		return fmt.Appendf(nil, `[%s,0]`, inner)
	}
	if n, err := strconv.ParseInt(string(v), 10, 64); err == nil && n < 1<<62 {
		return strconv.AppendInt(nil, n+1, 10)
	}
	if f, err := strconv.ParseFloat(string(v), 64); err == nil {
		return strconv.AppendFloat(nil, f+1, 'g', -1, 64)
	}
	return []byte("0")
}

func otherString(s string) string {
	if s == "" {
		return "x"
	}
	b := []byte(s)
	last := b[len(b)-1]
	switch {
	case last >= 'a' && last < 'z', last >= 'A' && last < 'Z', last >= '0' && last < '9':
		b[len(b)-1] = last + 1
	case last == 'z':
		b[len(b)-1] = 'a'
	case last == 'Z':
		b[len(b)-1] = 'A'
	case last == '9':
		b[len(b)-1] = '0'
	default:
		b = append(b, 'x')
	}
	return string(b)
}

// fieldID is the row id for the field name: its letters, digits, '_', '.'
// and '-', others as '_'.
func fieldID(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			b[i] = '_'
		}
	}
	return "mismatch-field-" + string(b)
}

// fieldScenario checks the fingerprint field by field: each top-level field
// of the (rendered) body changed alone, then the query string changed
// alone, each under a key its original request used.
func fieldScenario(c *Config) scenario {
	n := min(len(topLevelFields(render(c.Body, "0"))), maxFields)
	return scenario{requests: 2 * (n + 1), run: fields}
}

func fields(ctx context.Context, r *runner) []Row {
	var rows []Row
	body := render(r.cfg.Body, "0") // the fields, as any operation's body has them
	list := topLevelFields(body)
	if len(list) == 0 {
		rows = append(rows, Row{ID: "mismatch-field-*", Title: "each top-level field of the body changed alone, same key",
			Verdict: Skip, Source: srcFingerprintFields, Expected: fieldExpected,
			Got: "the body is not a JSON object with fields: nothing to change one at a time"})
	}
	for i, f := range list {
		row := Row{ID: fieldID(f.name), Title: fmt.Sprintf("the same key with the body's field %q changed alone", f.name),
			Expected: fieldExpected, Source: srcFingerprintFields}
		if i == maxFields {
			var rest []string
			for _, g := range list[i:] {
				rest = append(rest, strconv.Quote(g.name))
			}
			row.ID, row.Title = "mismatch-field-*", "the body's other fields changed alone"
			rows = append(rows, row.skippedRow(fmt.Sprintf("not checked: at most %d fields are; not %s", maxFields, strings.Join(rest, ", "))))
			break
		}
		op := r.newOperation()
		rendered := render(r.cfg.Body, op.id)
		// The rendered body has the fields where the template has them,
		// shifted by what {{id}} became: look them up again.
		g := topLevelFields(rendered)
		if len(g) != len(list) {
			rows = append(rows, row.skippedRow("the body with its id filled in is not the same JSON object"))
			continue
		}
		rows = append(rows, changedAlone(ctx, r, row, op, reqOpts{body: withFieldChanged(rendered, g[i])}, fmt.Sprintf("field %q", f.name)))
	}
	row := Row{ID: "mismatch-query", Title: "the same key and body with the query string changed alone (" + queryVariant + " added)",
		Expected: fieldExpected, Source: srcFingerprintQuery}
	return append(rows, changedAlone(ctx, r, row, r.newOperation(), reqOpts{query: queryVariant}, "query string"))
}

const fieldExpected = "422, or its own execution (WARN); never the first answer"

// changedAlone sends op's request, then, under the same key, the request
// with one thing changed (change; what names it), and judges the second
// answer.
func changedAlone(ctx context.Context, r *runner, row Row, op operation, change reqOpts, what string) Row {
	first := r.send(ctx, reqOpts{keys: []string{op.key}, op: op.id})
	if first.failed() {
		return row.skippedRow(firstFailed(first))
	}
	change.keys, change.op = []string{op.key}, op.id
	other := r.send(ctx, change)
	row.Got = other.short()
	row.Evidence = evidence(first, other)
	switch {
	case other.failed():
		row.Verdict = Fail
	case other.status == http.StatusUnprocessableEntity:
		row.Verdict, row.Evidence = Pass, nil
	case other.replayed || sameAnswer(first, other):
		row.Verdict = Fail
		row.Got += fmt.Sprintf(": the first answer for a request whose %s changed: the fingerprint ignores it, and the changed request is silently dropped", what)
	case other.is4xx():
		row.Verdict = Warn
		row.Got += ": refused, but the draft says 422"
	default:
		row.Verdict = Warn
		row.Got += fmt.Sprintf(": its own execution: the %s is told apart, but a used key ran again (the draft says 422)", what)
	}
	return row
}
