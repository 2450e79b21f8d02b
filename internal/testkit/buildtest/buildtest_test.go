package buildtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestBuildOnceAndRemove(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	src := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/hello\n\ngo 1.22\n")
	write("main.go", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello\") }\n")
	t.Setenv("GOWORK", "off")

	b := New("buildtest-test-")
	bin, err := b.Build("hello", src)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin).Output(); err != nil || strings.TrimSpace(string(out)) != "hello" {
		t.Fatalf("running the binary: %q, %v", out, err)
	}
	write("main.go", "package main\n\nfunc main() { syntax error }\n")
	if again, err := b.Build("hello", src); err != nil || again != bin {
		t.Errorf("second Build = %q, %v; want the first's %q, built once", again, err, bin)
	}
	if _, err := b.Build("broken", src); err == nil || !strings.Contains(err.Error(), "go build "+src) {
		t.Errorf("Build of a package that does not compile: %v, want go build's error naming %s", err, src)
	}
	b.Remove()
	if _, err := os.Stat(bin); !os.IsNotExist(err) {
		t.Errorf("after Remove, %s: %v; want it gone", bin, err)
	}
}
