package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/rs/zerolog"
)

func TestMain(m *testing.M) {
	if os.Getenv(grpcChildStore) != "" {
		// A gRPC server process of TestGRPCServerKilledMidHandler.
		if err := runGRPCChild(); err != nil {
			fmt.Fprintln(os.Stderr, "gRPC server process:", err)
		}
		os.Exit(2)
	}
	// toxiproxy logs through zerolog's global logger in a few places; the tests
	// have nothing to learn from it.
	zerolog.SetGlobalLevel(zerolog.Disabled)
	code := m.Run()
	bins.Remove()
	os.Exit(code)
}
