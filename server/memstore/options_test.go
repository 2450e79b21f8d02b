package memstore_test

import (
	"testing"

	"github.com/idemkit/idem/server/memstore"
)

func TestNewPanicsOnNilOption(t *testing.T) {
	defer func() {
		if msg, _ := recover().(string); msg != "memstore: New: nil Option" {
			t.Errorf("panic %q, want one naming the nil Option", msg)
		}
	}()
	memstore.New(nil)
}
