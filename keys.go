package idem

import (
	"context"
	"crypto/rand"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/idemkit/idem/internal/keyformat"
)

// headerKeyName is the request header that carries the key of an
// operation (draft-ietf-httpapi-idempotency-key-header).
const headerKeyName = "Idempotency-Key"

// headerReplayed is the response header with which a server marks a replay of
// a stored response ("true").
const headerReplayed = "Idempotent-Replayed"

// keyCtxKey is the context key under which ContextWithKey stores a key.
type keyCtxKey struct{}

// ContextWithKey returns a copy of ctx that carries key: a request made with it uses
// key as its Idempotency-Key, unless the request already has that header. Use it
// when the key must survive a restart (derive it with KeyFor or DeriveKey), or to
// make a method other than POST and PATCH keyed. An invalid key fails the
// request with ErrInvalidKey before anything is sent.
func ContextWithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtxKey{}, key)
}

// keyFromContext returns the key ContextWithKey stored in ctx.
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

// Replayed reports whether resp is a replay of a stored response: the server saw
// the key before and sent the first execution's answer again
// (Idempotent-Replayed: true).
func Replayed(resp *http.Response) bool {
	if resp == nil {
		return false
	}
	v := resp.Header.Get(headerReplayed)
	return strings.EqualFold(strings.TrimSpace(v), "true")
}

// newKey is the default key generator: a random UUID version 4, as
// uuid.NewString makes it from crypto/rand, with the random bytes read
// straight into the UUID (crypto/rand.Read keeps them on the stack, where
// uuid's reader interface moves them to the heap): the key's string is the
// one allocation.
func newKey() string {
	var u uuid.UUID
	_, _ = rand.Read(u[:])  // crypto/rand.Read never fails
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // the RFC 9562 variant
	return u.String()
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

// resolveKey returns the operation's key and, when the Transport must add it
// to the request, the header value to send. A key on the request's header
// (scan, from wellFormed) is used as it is (under the canonical name or any
// other spelling of it, never sent twice); otherwise the context's key;
// otherwise, for POST and PATCH, a generated one (generated is then true). An
// unkeyed operation returns "", "".
func (c *config) resolveKey(req *http.Request, scan headerScan) (key, header string, generated bool, err error) {
	if n := scan.keys; n > 0 {
		if n != 1 {
			return "", "", false, &keyError{source: "header", reason: strconv.Itoa(n) + " values"}
		}
		key, err = parseKey(scan.key)
		return key, "", false, err
	}
	source := "context"
	key, ok := keyFromContext(req.Context())
	if !ok {
		if !c.autoKeys || !autoKeyMethod(req.Method) {
			return "", "", false, nil
		}
		source, key, generated = "generator", c.keyGen(), true
	}
	header, err = keyformat.Format(key, c.quotedKeys)
	if err != nil {
		return "", "", false, &keyError{source: source, reason: err.Error()}
	}
	return key, header, generated, nil
}

// parseKey decodes an Idempotency-Key header value with the grammar both halves
// of idem share (internal/keyformat).
func parseKey(v string) (string, error) {
	k, err := keyformat.Parse(v, keyformat.MaxLen)
	if err != nil {
		return "", &keyError{source: "header", reason: err.Error()}
	}
	return k, nil
}
