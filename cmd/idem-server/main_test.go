package main

import (
	"os"
	"testing"
)

var testTempDir string

// tempDir is a directory removed after every test of the package has run.
func tempDir() (string, error) {
	if testTempDir == "" {
		return "", os.ErrNotExist
	}
	return testTempDir, nil
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idem-server-test")
	if err == nil {
		testTempDir = dir
	}
	code := m.Run()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	os.Exit(code)
}
