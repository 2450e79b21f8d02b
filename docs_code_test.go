package idem_test

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// The Go code in the Markdown files compiles: TestDocCodeBlocks extracts
// every ```go block of every .md file of the repository, makes each a package
// of its own as the convention below says, and runs go build and go vet on
// them in a temporary module of the repository's workspace (go.work), so a
// block may use any package a module of the workspace requires. A renamed
// API cannot leave a doc behind. docs/contributing.md repeats the
// convention for writers.
//
// A block is one of:
//
//   - a whole file: it starts with a package clause (comments may come
//     first), and is compiled as it is;
//   - a fragment: optional import declarations, then statements, then
//     optional top-level declarations, which start at the first line that
//     begins with "func " or "type " in the first column. The statements are
//     the body of a function returning error (so "return err" works), whose
//     top-level variables count as used; the declarations follow it in the
//     same file;
//   - not Go to compile: ```go no-check (a sketch, a signature shown for
//     reading, an excerpt that cannot stand alone): say in the text why. A
//     block in another language takes that language's tag (sh, sql, json,
//     text).
//
// A fragment needs no imports for the packages of docImports, found by the
// names it uses (a block that imports a package itself keeps its import);
// and may use the placeholder names of docPlaceholders (ctx, store, ...)
// without declaring them. Anything else it uses, it declares.
//
// A failure names the Markdown file, the block's number in it and its line;
// the compiler's messages point at the Markdown lines themselves.
func TestDocCodeBlocks(t *testing.T) {
	t.Parallel()
	blocks := goBlocks(t, ".")
	if len(blocks) < 10 {
		t.Fatalf("found %d Go blocks in the Markdown files: is the test running at the repository root?", len(blocks))
	}
	for _, f := range checkGoBlocks(t, blocks) {
		t.Error(f)
	}
}

// TestDocCodeBlocksMessage: a block that does not compile is reported with
// its file, its number in the file and the Markdown line of the error, and
// the blocks around it are not blamed.
func TestDocCodeBlocksMessage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	md := filepath.Join(dir, "guide.md")
	doc := "# A guide\n\n```go\nclient := idem.NewClient()\n_ = client\n```\n\nThen:\n\n" +
		"```go\nresp, err := idem.NewClient().Get(url)\nfmt.Println(resp.StatusCode, err, idem.Renamed)\n```\n\n" +
		"```go no-check\nthis is not Go\n```\n\n```sh\nmake test\n```\n"
	if err := os.WriteFile(md, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(t, dir)
	if len(blocks) != 2 {
		t.Fatalf("found %d Go blocks to check, want 2 (no-check and sh are not)", len(blocks))
	}
	fails := checkGoBlocks(t, blocks)
	if len(fails) != 1 {
		t.Fatalf("%d failures, want 1 (block 2):\n%s", len(fails), strings.Join(fails, "\n"))
	}
	for _, want := range []string{"guide.md:10: Go block 2 (lines 11-12) does not compile", "guide.md:12:", "Renamed"} {
		if !strings.Contains(fails[0], want) {
			t.Errorf("the failure does not say %q:\n%s", want, fails[0])
		}
	}
}

// docImports are the packages a fragment may use without importing them,
// by the name it uses. A name two packages share (middleware: chi's and
// echo's) is not here: the block imports the one it means.
var docImports = map[string]string{
	"bytes": "bytes", "context": "context", "errors": "errors", "fmt": "fmt", "io": "io", "log": "log",
	"slog": "log/slog", "http": "net/http", "httptest": "net/http/httptest", "json": "encoding/json",
	"os": "os", "signal": "os/signal", "strconv": "strconv", "strings": "strings", "sync": "sync",
	"syscall": "syscall", "time": "time",

	"idem":       "github.com/idemkit/idem",
	"server":     "github.com/idemkit/idem/server",
	"memstore":   "github.com/idemkit/idem/server/memstore",
	"pgstore":    "github.com/idemkit/idem/server/pgstore",
	"redisstore": "github.com/idemkit/idem/server/redisstore",
	"storetest":  "github.com/idemkit/idem/server/storetest",
	"idemtest":   "github.com/idemkit/idem/server/idemtest",
	"chaos":      "github.com/idemkit/idem/server/chaos",
	"ginidem":    "github.com/idemkit/idem/server/ginidem",
	"echoidem":   "github.com/idemkit/idem/server/echoidem",
	"idemotel":   "github.com/idemkit/idem/otel",

	"uuid":          "github.com/google/uuid",
	"pgx":           "github.com/jackc/pgx/v5",
	"pgxpool":       "github.com/jackc/pgx/v5/pgxpool",
	"redis":         "github.com/redis/go-redis/v9",
	"gin":           "github.com/gin-gonic/gin",
	"echo":          "github.com/labstack/echo/v4",
	"chi":           "github.com/go-chi/chi/v5",
	"mux":           "github.com/gorilla/mux",
	"otel":          "go.opentelemetry.io/otel",
	"otelhttp":      "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp",
	"retryablehttp": "github.com/hashicorp/go-retryablehttp",
}

// docPlaceholders are the names a fragment may use without declaring them:
// what a reader's program has around the snippet. Each is declared, in a file
// of the block's package, only when the block uses it and does not declare it.
var docPlaceholders = map[string]struct{ decl, imports string }{
	"ctx":           {"var ctx = context.Background()", "context"},
	"err":           {"var err error", ""},
	"resp":          {"var resp *http.Response", "net/http"},
	"url":           {`var url = "https://api.example.com/payments"`, ""},
	"body":          {"var body io.Reader", "io"},
	"req":           {"var req *http.Request", "net/http"},
	"store":         {"var store server.Store", "github.com/idemkit/idem/server"},
	"pool":          {"var pool *pgxpool.Pool", "github.com/jackc/pgx/v5/pgxpool"},
	"rdb":           {"var rdb *redis.Client", "github.com/redis/go-redis/v9"},
	"create":        {"var create http.HandlerFunc // a handler of yours", "net/http"},
	"createPayment": {"var createPayment http.HandlerFunc // a handler of yours", "net/http"},
	"provider":      {"var provider interface{ Charge(ctx context.Context, amount int64) (any, error) } // a payment provider's client", "context"},
	"amount":        {"var amount int64", ""},
	"errorsAsJSON":  {"var errorsAsJSON gin.HandlerFunc // an error-handling middleware of yours", "github.com/gin-gonic/gin"},
}

// goBlock is one ```go block of a Markdown file.
type goBlock struct {
	file  string // as found under the root, for messages
	abs   string // absolute, for //line directives
	n     int    // its number among the file's Go blocks, from 1
	fence int    // the line of its opening fence
	lines []string
}

var mdFenceLine = regexp.MustCompile("^( *)(```+|~~~+)\\s*([^\\s`]*)(.*)$")

// goBlocks returns the Go blocks to check of every .md file under root
// (hidden directories, testdata, vendor and node_modules left out).
func goBlocks(t *testing.T, root string) []goBlock {
	t.Helper()
	var blocks []goBlock
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
		if !strings.HasSuffix(path, ".md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return err
		}
		blocks = append(blocks, goBlocksOf(path, abs, string(b))...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return blocks
}

// goBlocksOf returns the Go blocks of one Markdown text, each with its
// indentation removed.
func goBlocksOf(file, abs, text string) []goBlock {
	var blocks []goBlock
	lines := strings.Split(text, "\n")
	n := 0
	for i := 0; i < len(lines); i++ {
		m := mdFenceLine.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, fence, lang, rest := len(m[1]), m[2], m[3], strings.Fields(m[4])
		start := i
		var body []string
		for i++; i < len(lines); i++ {
			l := strings.TrimRight(lines[i], " \t")
			if strings.HasPrefix(strings.TrimLeft(l, " "), fence) && strings.Trim(l, " "+fence[:1]) == "" {
				break
			}
			body = append(body, strings.TrimPrefix(lines[i], strings.Repeat(" ", indent)))
		}
		if lang != "go" && lang != "golang" {
			continue
		}
		n++
		if slices.Contains(rest, "no-check") {
			continue
		}
		blocks = append(blocks, goBlock{file: file, abs: abs, n: n, fence: start + 1, lines: body})
	}
	return blocks
}

// checkGoBlocks builds and vets blocks and returns one message per block
// that fails.
func checkGoBlocks(t *testing.T, blocks []goBlock) []string {
	t.Helper()
	dir := t.TempDir()
	mod := filepath.Join(dir, "blocks")
	writeWorkspace(t, dir, "./blocks")
	files := map[string]string{"go.mod": "module docblocks\n\ngo 1.26.0\n"}
	var fails []string
	byPkg := map[string]goBlock{}
	for i, b := range blocks {
		pkg := fmt.Sprintf("b%03d", i+1)
		src, placeholders, err := wrapGoBlock(pkg, b)
		if err != nil {
			fails = append(fails, blockFailure(b, err.Error()))
			continue
		}
		byPkg["docblocks/"+pkg] = b
		files[filepath.Join(pkg, "block.go")] = src
		if placeholders != "" {
			files[filepath.Join(pkg, "placeholders.go")] = placeholders
		}
	}
	for name, src := range files {
		path := filepath.Join(mod, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(byPkg) == 0 {
		return fails
	}
	failed := map[string]bool{}
	for _, verb := range []string{"build", "vet"} {
		// From the repository root, so that the messages name the Markdown
		// files as the test does.
		cmd := exec.Command("go", verb, "docblocks/...")
		cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"))
		out, err := cmd.CombinedOutput()
		if err == nil {
			continue
		}
		perPkg, rest := splitGoOutput(string(out))
		if len(perPkg) == 0 {
			t.Fatalf("go %s of the doc blocks failed outside any block: %v\n%s", verb, err, rest)
		}
		for _, pkg := range sortedKeys(perPkg) {
			b, ok := byPkg[pkg]
			switch {
			case !ok:
				t.Fatalf("go %s: output for an unknown package %s:\n%s", verb, pkg, perPkg[pkg])
			case failed[pkg]: // vet repeats build's errors
			default:
				fails = append(fails, blockFailure(b, "go "+verb+":\n"+perPkg[pkg]))
				failed[pkg] = true
			}
		}
	}
	return fails
}

// blockFailure is the message for block b, which fails with msg.
func blockFailure(b goBlock, msg string) string {
	msg = strings.ReplaceAll(msg, filepath.Dir(b.abs)+string(filepath.Separator), filepath.Dir(b.file)+string(filepath.Separator))
	msg = strings.ReplaceAll(msg, "\t./", "\t")
	return fmt.Sprintf("%s:%d: Go block %d (lines %d-%d) does not compile; fix it, or see the convention in docs/contributing.md#go-code-in-the-docs\n%s",
		b.file, b.fence, b.n, b.fence+1, b.fence+len(b.lines), strings.TrimRight(msg, "\n"))
}

// splitGoOutput splits the output of go build or go vet by package ("#
// docblocks/b001" headers); rest is what came before any header.
func splitGoOutput(out string) (map[string]string, string) {
	perPkg := map[string]string{}
	var rest strings.Builder
	pkg := ""
	for line := range strings.Lines(out) {
		if p, ok := strings.CutPrefix(line, "# "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		if pkg == "" {
			rest.WriteString(line)
			continue
		}
		perPkg[pkg] += "\t" + line
	}
	return perPkg, rest.String()
}

// writeWorkspace writes dir/go.work: the repository's workspace (its modules
// and replaces, by absolute path) plus the module use, and its go.work.sum.
func writeWorkspace(t *testing.T, dir, use string) {
	t.Helper()
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "work", "edit", "-json", filepath.Join(root, "go.work")).Output()
	if err != nil {
		t.Fatalf("go work edit -json go.work: %v", err)
	}
	type modVersion struct{ Path, Version string }
	var work struct {
		Go  string
		Use []struct{ DiskPath string }
		// Replace lists the workspace's replace directives.
		Replace []struct{ Old, New modVersion }
	}
	if err := json.Unmarshal(out, &work); err != nil {
		t.Fatal(err)
	}
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(root, p)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "go %s\n\nuse (\n\t%s\n", work.Go, use)
	for _, u := range work.Use {
		fmt.Fprintf(&b, "\t%s\n", strconv.Quote(abs(u.DiskPath)))
	}
	b.WriteString(")\n\nreplace (\n")
	for _, r := range work.Replace {
		old := r.Old.Path
		if r.Old.Version != "" {
			old += " " + r.Old.Version
		}
		replacement := strconv.Quote(abs(r.New.Path))
		if r.New.Version != "" {
			replacement = r.New.Path + " " + r.New.Version
		}
		fmt.Fprintf(&b, "\t%s => %s\n", old, replacement)
	}
	b.WriteString(")\n")
	if err := os.WriteFile(filepath.Join(dir, "go.work"), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if sum, err := os.ReadFile(filepath.Join(root, "go.work.sum")); err == nil {
		if err := os.WriteFile(filepath.Join(dir, "go.work.sum"), sum, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

var (
	packageClause = regexp.MustCompile(`^package\s+\w+`)
	importLine    = regexp.MustCompile(`^import\s*(\(|(\w+\s+)?"[^"]*")`)
	declLine      = regexp.MustCompile(`^(func|type)\s`)
)

// wrapGoBlock returns the source of package pkg made of block b, as the
// convention of TestDocCodeBlocks says, and the source of the file that
// declares the placeholders it uses ("" for none). Every line of the block
// keeps its Markdown position (//line directives), so the compiler's
// messages point into the Markdown file.
func wrapGoBlock(pkg string, b goBlock) (src, placeholders string, err error) {
	at := func(i int) string { return fmt.Sprintf("//line %s:%d:1\n", b.abs, b.fence+1+i) }
	first := 0
	for first < len(b.lines) && (strings.TrimSpace(b.lines[first]) == "" || strings.HasPrefix(strings.TrimSpace(b.lines[first]), "//")) {
		first++
	}
	if first < len(b.lines) && packageClause.MatchString(b.lines[first]) {
		return at(0) + strings.Join(b.lines, "\n") + "\n", "", nil // a whole file
	}

	// Split the fragment: imports, statements, declarations.
	imports, stmts := 0, 0 // the ends of the imports and of the statements
	for i := first; i < len(b.lines); i++ {
		l := b.lines[i]
		if importLine.MatchString(l) {
			if strings.HasPrefix(strings.TrimSpace(strings.TrimPrefix(l, "import")), "(") {
				for i < len(b.lines) && strings.TrimSpace(b.lines[i]) != ")" {
					i++
				}
			}
			imports = i + 1
			continue
		}
		if strings.TrimSpace(l) != "" {
			break
		}
	}
	stmts = len(b.lines)
	for i := imports; i < len(b.lines); i++ {
		if declLine.MatchString(b.lines[i]) {
			stmts = i
			break
		}
	}
	var s strings.Builder
	fmt.Fprintf(&s, "package %s\n\n", pkg)
	header := s.Len() // the auto imports go here
	if imports > 0 {
		s.WriteString(at(0) + strings.Join(b.lines[:imports], "\n") + "\n")
	}
	s.WriteString(at(imports-1) + "func _() error {\n")
	if stmts > imports {
		s.WriteString(at(imports) + strings.Join(b.lines[imports:stmts], "\n") + "\n")
	}
	tail := s.Len() // "return nil" goes here when the statements do not end with a return
	s.WriteString(at(len(b.lines)) + "}\n")
	if stmts < len(b.lines) {
		s.WriteString(at(stmts) + strings.Join(b.lines[stmts:], "\n") + "\n")
	}
	src = s.String()

	// Parse it, with the Markdown positions, and see what it uses.
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "block.go", src, 0)
	if err != nil {
		return "", "", fmt.Errorf("does not parse as a fragment (imports, statements, declarations):\n\t%v", err)
	}
	var wrapper *ast.FuncDecl
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "_" && wrapper == nil {
			wrapper = fd
		}
	}
	offset := func(p token.Pos) int { return fset.File(p).Offset(p) }
	type insertion struct {
		at   int
		text string
	}
	var ins []insertion
	stmtList := wrapper.Body.List
	for _, st := range stmtList {
		var names []string
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, l := range st.Lhs {
					if id, ok := l.(*ast.Ident); ok && id.Name != "_" {
						names = append(names, id.Name)
					}
				}
			}
		case *ast.DeclStmt:
			if gd, ok := st.Decl.(*ast.GenDecl); ok && gd.Tok == token.VAR {
				for _, sp := range gd.Specs {
					for _, id := range sp.(*ast.ValueSpec).Names {
						if id.Name != "_" {
							names = append(names, id.Name)
						}
					}
				}
			}
		}
		for _, n := range names {
			ins = append(ins, insertion{offset(st.End()), "; _ = &" + n}) // used, as the reader's program would use it
		}
	}
	if len(stmtList) == 0 {
		ins = append(ins, insertion{tail, "return nil\n"})
	} else if _, ok := stmtList[len(stmtList)-1].(*ast.ReturnStmt); !ok {
		ins = append(ins, insertion{tail, "return nil\n"})
	}

	// The packages and placeholders it names and does not declare.
	imported := map[string]bool{}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		for n, path := range docImports {
			if path == p && im.Name == nil {
				name = n
			}
		}
		imported[name] = true
	}
	selected := map[*ast.Ident]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				selected[id] = true
			}
		}
		return true
	})
	auto, holders := map[string]bool{}, map[string]bool{}
	for _, id := range f.Unresolved {
		switch _, isPlaceholder := docPlaceholders[id.Name]; {
		case imported[id.Name]:
		case selected[id] && docImports[id.Name] != "":
			auto[docImports[id.Name]] = true
		case isPlaceholder:
			holders[id.Name] = true
		}
	}
	if len(auto) > 0 {
		var im strings.Builder
		im.WriteString("import (\n")
		for _, p := range sortedKeys(auto) {
			fmt.Fprintf(&im, "\t%q\n", p)
		}
		im.WriteString(")\n\n")
		ins = append(ins, insertion{header, im.String()})
	}
	slices.SortStableFunc(ins, func(a, b insertion) int { return b.at - a.at })
	for _, in := range ins {
		src = src[:in.at] + in.text + src[in.at:]
	}

	if len(holders) > 0 {
		var p strings.Builder
		fmt.Fprintf(&p, "package %s\n\n// The placeholders the block uses (docPlaceholders).\n\n", pkg)
		ims := map[string]bool{}
		for name := range holders {
			if im := docPlaceholders[name].imports; im != "" {
				ims[im] = true
			}
		}
		if len(ims) > 0 {
			p.WriteString("import (\n")
			for _, im := range sortedKeys(ims) {
				fmt.Fprintf(&p, "\t%q\n", im)
			}
			p.WriteString(")\n\n")
		}
		for _, name := range sortedKeys(holders) {
			p.WriteString(docPlaceholders[name].decl + "\n")
		}
		placeholders = p.String()
	}
	return src, placeholders, nil
}
