package idem

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// HeaderIdempotencyKey is the request header that carries the key of an
// operation (draft-ietf-httpapi-idempotency-key-header).
const HeaderIdempotencyKey = "Idempotency-Key"

// HeaderReplayed is the response header with which a server marks a replay of a
// stored response ("true").
const HeaderReplayed = "Idempotent-Replayed"

// MaxKeyLen is the longest key, in characters, that the Transport sends.
const MaxKeyLen = 255

// KeyFormat says how a key is written to the Idempotency-Key header.
type KeyFormat int

const (
	// KeyFormatRaw writes the key as it is: what Stripe and most servers read.
	// It is the zero value and the default.
	KeyFormatRaw KeyFormat = iota
	// KeyFormatString writes the key as an RFC 8941 Structured Field string, as
	// the IETF draft requires: in double quotes, with `"` and `\` escaped by a
	// backslash.
	KeyFormatString
)

// keyCtxKey is the context key under which WithKey stores a key.
type keyCtxKey struct{}

// WithKey returns a copy of ctx that carries key: a request made with it uses
// key as its Idempotency-Key, unless the request already has that header. Use it
// when the key must survive a restart (derive it with KeyFor or DeriveKey), or to
// make a method other than POST and PATCH keyed. An invalid key fails the
// request with ErrInvalidKey before anything is sent.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtxKey{}, key)
}

// keyFromContext returns the key WithKey stored in ctx.
func keyFromContext(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(keyCtxKey{}).(string)
	return k, ok
}

// Namespaces of the UUIDs that KeyFor and DeriveKey make.
var (
	// deriveNamespace is UUIDv5(NameSpaceURL, "idem:derive").
	deriveNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("idem:derive"))
)

// KeyFor returns a deterministic key for the business operation id within
// namespace: the UUID version 5 of id in the namespace
// UUIDv5(uuid.NameSpaceURL, "idem:"+namespace). The same (namespace, id) gives
// the same key in every process and release, so a retried job or a restarted
// client sends the key it sent before; different namespaces never share keys.
func KeyFor(namespace, id string) string {
	ns := uuid.NewSHA1(uuid.NameSpaceURL, []byte("idem:"+namespace))
	return uuid.NewSHA1(ns, []byte(id)).String()
}

// DeriveKey returns the key of the downstream step of the operation whose key is
// parentKey: the UUID version 5, in the namespace UUIDv5(uuid.NameSpaceURL,
// "idem:derive"), of the name len(parentKey) ":" parentKey step (the length
// keeps ("a", "bc") and ("ab", "c") apart). A handler that is re-run for the same
// upstream key sends the same keys downstream, so every layer is idempotent.
func DeriveKey(parentKey, step string) string {
	name := make([]byte, 0, 24+len(parentKey)+len(step))
	name = strconv.AppendInt(name, int64(len(parentKey)), 10)
	name = append(name, ':')
	name = append(name, parentKey...)
	name = append(name, step...)
	return uuid.NewSHA1(deriveNamespace, name).String()
}

// UUIDv7 returns a new random, time-ordered UUID version 7, which keeps a
// server's B-tree index of keys compact. Use it with WithKeyGenerator.
func UUIDv7() string {
	return uuid.Must(uuid.NewV7()).String()
}

// KeyFromRequest returns the key that r carries, decoded: the Idempotency-Key
// header (a Structured Field string is unquoted), else the key in r's context,
// else "". After RoundTrip, resp.Request is the request actually sent, so
// KeyFromRequest(resp.Request) is the key the operation used.
func KeyFromRequest(r *http.Request) string {
	if r == nil {
		return ""
	}
	if vs := r.Header[HeaderIdempotencyKey]; len(vs) > 0 {
		if k, err := parseKey(vs[0]); err == nil {
			return k
		}
		return vs[0]
	}
	if k, ok := keyFromContext(r.Context()); ok {
		return k
	}
	return ""
}

// Replayed reports whether resp is a replay of a stored response: the server saw
// the key before and sent the first execution's answer again
// (Idempotent-Replayed: true).
func Replayed(resp *http.Response) bool {
	if resp == nil {
		return false
	}
	v := resp.Header.Get(HeaderReplayed)
	return strings.EqualFold(strings.TrimSpace(v), "true")
}

// keyError is an invalid key: it wraps ErrInvalidKey with where the key came
// from and what is wrong with it.
type keyError struct {
	source string // "header", "context" or "generator"
	reason string
}

func (e *keyError) Error() string {
	return "idem: invalid idempotency key from the " + e.source + ": " + e.reason
}

func (e *keyError) Unwrap() error { return ErrInvalidKey }

// checkKey returns the reason key is not a valid key, or "".
func checkKey(key string) string {
	if key == "" {
		return "empty"
	}
	if len(key) > MaxKeyLen {
		return "longer than 255 characters"
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return "not visible ASCII (byte " + strconv.Itoa(i) + " is " + strconv.Quote(key[i:i+1]) + ")"
		}
	}
	return ""
}

// checkOutgoingKey returns the reason key cannot be sent in format f, or "". A
// raw key may not start with a double quote: a server would read it as a
// Structured Field string.
func checkOutgoingKey(key string, f KeyFormat) string {
	if reason := checkKey(key); reason != "" {
		return reason
	}
	if f == KeyFormatRaw && key[0] == '"' {
		return "starts with a double quote, which reads as a Structured Field string (use KeyFormatString)"
	}
	return ""
}

// formatKey writes a valid key in format f.
func formatKey(key string, f KeyFormat) string {
	if f == KeyFormatString {
		return encodeSFString(key)
	}
	return key
}

// parseKey decodes an Idempotency-Key header value and checks the key: a value
// that starts with a double quote must be a well-formed Structured Field string;
// any other value is the key itself.
func parseKey(v string) (string, error) {
	key := v
	if strings.HasPrefix(v, `"`) {
		k, reason := decodeSFString(v)
		if reason != "" {
			return "", &keyError{source: "header", reason: reason}
		}
		key = k
	}
	if reason := checkKey(key); reason != "" {
		return "", &keyError{source: "header", reason: reason}
	}
	return key, nil
}

// encodeSFString returns s as an RFC 8941 sf-string: in double quotes, with `"`
// and `\` escaped. s must hold only printable ASCII (0x20-0x7E).
func encodeSFString(s string) string {
	n := len(s) + 2
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			n++
		}
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// decodeSFString parses v as an RFC 8941 sf-string (RFC 8941 §4.2.5), with
// optional spaces around it as in a header field. It returns the string, or a
// reason why v is not one.
func decodeSFString(v string) (string, string) {
	v = strings.Trim(v, " \t")
	if len(v) < 2 || v[0] != '"' {
		return "", "malformed Structured Field string: missing opening quote"
	}
	var b []byte // nil until the first escape
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			if i+1 >= len(v) {
				return "", "malformed Structured Field string: backslash at the end"
			}
			next := v[i+1]
			if next != '"' && next != '\\' {
				return "", "malformed Structured Field string: bad escape \\" + strconv.Quote(v[i+1:i+2])
			}
			if b == nil {
				b = append(make([]byte, 0, len(v)), v[1:i]...)
			}
			b = append(b, next)
			i++
		case c == '"':
			if i != len(v)-1 {
				return "", "malformed Structured Field string: characters after the closing quote"
			}
			if b == nil {
				return v[1:i], ""
			}
			return string(b), ""
		case c < 0x20 || c > 0x7e:
			return "", "malformed Structured Field string: byte " + strconv.Quote(v[i:i+1]) + " not allowed"
		default:
			if b != nil {
				b = append(b, c)
			}
		}
	}
	return "", "malformed Structured Field string: unterminated"
}
