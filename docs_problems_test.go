package idem_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// problemBase is the prefix of every problem type URI (server.ProblemBase):
// each type names a section of docs/problems.md.
const problemBase = "https://github.com/idemkit/idem/blob/main/docs/problems.md#"

// problemType is one problem type the code defines, found in its source.
type problemType struct {
	name     string       // the section's anchor: "missing-key"
	at       string       // where the code defines it (file:line)
	statuses map[int]bool // the statuses the code answers it with, where a literal says
}

// TestProblemTypesHaveSections reads every Go file of the repository that is
// not a test (every module: the server, chaos, the demo, the test kits, the
// commands) and finds the problem types the code can answer with, by what it
// defines: ProblemBase + "name" (or server.ProblemBase + "name"), or a string
// that starts with the full URI. Each must have a section "## name" in
// docs/problems.md whose status line (the first line in bold) names every
// status the code gives it in a Problem or problem.Details literal; and every
// "## " section of problems.md must be a type the code defines, so that a
// removed type leaves no section behind.
func TestProblemTypesHaveSections(t *testing.T) {
	types := problemTypesInCode(t, ".")
	for _, want := range []string{"missing-key", "key-reused", "chaos-injected", "payments-bad-json"} {
		if types[want] == nil {
			t.Fatalf("found no problem type %q in the code (found %d): is the test running at the repository root?", want, len(types))
		}
	}
	doc, err := os.ReadFile("docs/problems.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := problemSections(string(doc))
	for _, name := range sortedKeys(types) {
		p := types[name]
		sec, ok := sections[name]
		if !ok {
			t.Errorf("%s defines the problem type %q, and docs/problems.md has no section \"## %s\": write one (status, what happened, what to do)", p.at, name, name)
			continue
		}
		for _, status := range sortedKeys(p.statuses) {
			if !strings.Contains(sec.statusLine, strconv.Itoa(status)) {
				t.Errorf("docs/problems.md:%d: the section %q says %q; the code (%s) answers it with %d", sec.line, name, sec.statusLine, p.at, status)
			}
		}
	}
	for _, name := range sortedKeys(sections) {
		if types[name] == nil {
			t.Errorf("docs/problems.md:%d: the section \"## %s\" is no problem type the code defines: remove it, or make it a paragraph of a type's section", sections[name].line, name)
		}
	}
}

// problemSection is a "## name" section of problems.md.
type problemSection struct {
	line       int    // of the heading
	statusLine string // the section's first line that starts with "**"
}

// problemSections returns the level-2 sections of problems.md by name.
func problemSections(doc string) map[string]problemSection {
	doc = mdFence.ReplaceAllStringFunc(doc, func(f string) string { return strings.Repeat("\n", strings.Count(f, "\n")) })
	sections := map[string]problemSection{}
	name := ""
	for i, line := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			name = strings.TrimSpace(strings.TrimPrefix(line, "## "))
			sections[name] = problemSection{line: i + 1}
		case name != "" && strings.HasPrefix(line, "**") && sections[name].statusLine == "":
			s := sections[name]
			s.statusLine = line
			sections[name] = s
		}
	}
	return sections
}

// problemTypesInCode parses every non-test Go file under root.
func problemTypesInCode(t *testing.T, root string) map[string]*problemType {
	t.Helper()
	statusCodes := httpStatusCodes(t)
	types := map[string]*problemType{}
	consts := map[string]string{} // constant name -> problem type name
	type use struct {
		typ    ast.Expr
		status int
		at     string
	}
	var uses []use
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, v := range n.Values {
					if name, ok := problemTypeName(v); ok && i < len(n.Names) {
						consts[n.Names[i].Name] = name
					}
				}
			case *ast.BinaryExpr, *ast.BasicLit:
				if name, ok := problemTypeName(n.(ast.Expr)); ok {
					if types[name] == nil {
						types[name] = &problemType{name: name, at: fset.Position(n.Pos()).String(), statuses: map[int]bool{}}
					}
					return false
				}
			case *ast.CompositeLit:
				var typ ast.Expr
				status := 0
				for _, e := range n.Elts {
					kv, ok := e.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					switch key, _ := kv.Key.(*ast.Ident); {
					case key == nil:
					case key.Name == "Type":
						typ = kv.Value
					case key.Name == "Status":
						status = statusOf(kv.Value, statusCodes)
					}
				}
				if typ != nil && status != 0 {
					uses = append(uses, use{typ, status, fset.Position(n.Pos()).String()})
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range uses {
		name, ok := problemTypeName(u.typ)
		if !ok {
			var id string
			switch e := u.typ.(type) {
			case *ast.Ident:
				id = e.Name
			case *ast.SelectorExpr:
				id = e.Sel.Name
			}
			name, ok = consts[id]
		}
		if ok && types[name] != nil {
			types[name].statuses[u.status] = true
		}
	}
	return types
}

// problemTypeName returns the section name of a problem type expression:
// ProblemBase + "name", x.ProblemBase + "name", or the full URI as a string.
func problemTypeName(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if s, err := strconv.Unquote(e.Value); err == nil && e.Kind == token.STRING && strings.HasPrefix(s, problemBase) && s != problemBase {
			return strings.TrimPrefix(s, problemBase), true
		}
	case *ast.BinaryExpr:
		lit, ok := e.Y.(*ast.BasicLit)
		if e.Op != token.ADD || !ok || lit.Kind != token.STRING {
			return "", false
		}
		var base string
		switch x := e.X.(type) {
		case *ast.Ident:
			base = x.Name
		case *ast.SelectorExpr:
			base = x.Sel.Name
		}
		if s, err := strconv.Unquote(lit.Value); err == nil && base == "ProblemBase" {
			return s, true
		}
	}
	return "", false
}

// statusOf returns the status an expression names (http.StatusXxx or a
// number), 0 when it is not a literal one.
func statusOf(e ast.Expr, codes map[string]int) int {
	switch e := e.(type) {
	case *ast.BasicLit:
		n, _ := strconv.Atoi(e.Value)
		return n
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && x.Name == "http" {
			return codes[e.Sel.Name]
		}
	}
	return 0
}

// httpStatusCodes reads net/http's StatusXxx constants from the Go tree in use.
func httpStatusCodes(t *testing.T) map[string]int {
	t.Helper()
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "src", "net", "http", "status.go"))
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(Status\w+)\s*=\s*(\d+)`).FindAllStringSubmatch(string(src), -1) {
		codes[m[1]], _ = strconv.Atoi(m[2])
	}
	if codes["StatusBadRequest"] != 400 || codes["StatusServiceUnavailable"] != 503 {
		t.Fatalf("read %d status codes from net/http's status.go, without StatusBadRequest or StatusServiceUnavailable", len(codes))
	}
	return codes
}

func sortedKeys[K string | int, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
