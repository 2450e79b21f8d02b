package scopecache

import (
	"strconv"
	"testing"
)

// TestCacheBounded: past MaxScopes a new scope takes an arbitrary one's place,
// a known scope is set in place, and Update changes only a known scope.
func TestCacheBounded(t *testing.T) {
	var c Cache[int]
	for i := range MaxScopes + 50 {
		c.Set(strconv.Itoa(i), i)
	}
	if n := len(c.m); n != MaxScopes {
		t.Fatalf("%d scopes after %d Sets, want MaxScopes (%d)", n, MaxScopes+50, MaxScopes)
	}
	last := strconv.Itoa(MaxScopes + 49)
	if v, ok := c.Get(last); !ok || v != MaxScopes+49 {
		t.Fatalf("the last scope set: %d, %v", v, ok)
	}
	c.Set(last, 7) // known: nothing dropped
	c.Update(last, func(v *int) { *v++ })
	c.Update("never-set", func(v *int) { t.Error("Update called f for a scope the cache does not know") })
	if v, _ := c.Get(last); v != 8 || len(c.m) != MaxScopes {
		t.Errorf("after Set and Update of a known scope: %d with %d scopes, want 8 with %d", v, len(c.m), MaxScopes)
	}
	if _, ok := c.Get("never-set"); ok {
		t.Error("Update added a scope the cache did not know")
	}
}
