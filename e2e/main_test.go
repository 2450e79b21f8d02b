package e2e

import (
	"os"
	"testing"

	"github.com/rs/zerolog"
)

func TestMain(m *testing.M) {
	// toxiproxy logs through zerolog's global logger in a few places; the tests
	// have nothing to learn from it.
	zerolog.SetGlobalLevel(zerolog.Disabled)
	code := m.Run()
	bins.Remove()
	os.Exit(code)
}
