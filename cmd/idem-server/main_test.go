package main

import (
	"os"
	"testing"

	"github.com/idemkit/idem/internal/testkit/buildtest"
)

// bins holds the binaries the tests build; TestMain removes them.
var bins = buildtest.New("idem-server-test")

func TestMain(m *testing.M) {
	code := m.Run()
	bins.Remove()
	os.Exit(code)
}
