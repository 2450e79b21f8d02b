package check

import (
	"bytes"
	"strings"
)

// IDPlaceholder, in Config.Body and Config.OtherBody, in an EffectURL's URL
// or an EffectCommand's arguments, stands for the id of one operation: each
// new idempotency key is a new operation with an id of its own (lower-case
// letters and digits, at most 32), so that a body such as
// {"customer":"cus_{{id}}"} and an effect count such as
// GET /payments?customer=cus_{{id}} count that operation alone.
const IDPlaceholder = "{{id}}"

// operationID is the id of the operation under key: its letters and digits,
// lower-cased, at most 32 of them (a UUID's 32 hex digits).
func operationID(key string) string {
	var b strings.Builder
	for _, c := range []byte(strings.ToLower(key)) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
			if b.Len() == 32 {
				break
			}
		}
	}
	return b.String()
}

// render replaces IDPlaceholder in t with id.
func render(t []byte, id string) []byte {
	if !bytes.Contains(t, []byte(IDPlaceholder)) {
		return t
	}
	return bytes.ReplaceAll(t, []byte(IDPlaceholder), []byte(id))
}

// An operation is one idempotency key and the id its bodies carry.
type operation struct{ key, id string }

func (r *runner) newOperation() operation {
	key := r.cfg.NewKey()
	return operation{key: key, id: operationID(key)}
}
