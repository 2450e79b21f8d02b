// Package scopecache is the stores' cache of what they know about each scope
// they served (its usage, for their share per scope): a map from scope to a
// value, safe for concurrent use, holding at most MaxScopes scopes. Past it,
// an arbitrary scope is dropped to make room; each store says what a scope it
// no longer knows gets.
package scopecache

import "sync"

// MaxScopes bounds a Cache, so that callers who take a new scope with every
// request cannot grow it without end.
const MaxScopes = 10_000

// Cache maps scopes to values of V. The zero value is empty and ready to use.
type Cache[V any] struct {
	mu sync.Mutex
	m  map[string]V
}

// Get returns scope's value, and whether the cache knows the scope.
func (c *Cache[V]) Get(scope string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[scope]
	return v, ok
}

// Set makes v scope's value, dropping an arbitrary other scope first when the
// cache holds MaxScopes and scope is not one of them.
func (c *Cache[V]) Set(scope string, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]V)
	}
	if _, ok := c.m[scope]; !ok && len(c.m) >= MaxScopes {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[scope] = v
}

// Update calls f with scope's value, under the cache's lock, if the cache
// knows the scope; it does nothing otherwise.
func (c *Cache[V]) Update(scope string, f func(*V)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.m[scope]; ok {
		f(&v)
		c.m[scope] = v
	}
}
