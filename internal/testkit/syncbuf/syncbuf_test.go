package syncbuf

import (
	"fmt"
	"sync"
	"testing"
)

func TestBuffer(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { fmt.Fprintf(&b, "line %d\n", i); _ = b.String() })
	}
	wg.Wait()
	if got := len(b.String()); got != 8*len("line 0\n") {
		t.Errorf("%d bytes written, want %d", got, 8*len("line 0\n"))
	}
	var c Buffer
	c.Write([]byte("a\nb\nc\n"))
	for _, tt := range []struct {
		n    int
		want string
	}{{1, "c"}, {2, "b\nc"}, {5, "a\nb\nc"}} {
		if got := c.Tail(tt.n); got != tt.want {
			t.Errorf("Tail(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}
