package check

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"
)

// An Effect counts what the operation did on the server (payments made,
// rows written): a count that each execution raises by one. The check reads
// it before and after a row to tell executions from replays.
//
// An Effect that also has the method ForOperation(id string) Effect (an
// OperationEffect, as EffectURL and EffectCommand are) can count one
// operation alone: the check counts each operation with the Effect
// ForOperation returns for its id (see IDPlaceholder).
type Effect interface {
	Count(ctx context.Context) (int64, error)
	// String says what is counted, for the report.
	String() string
}

// An OperationEffect is an Effect that can count the effects of one
// operation: the one whose body carries id in place of IDPlaceholder.
type OperationEffect interface {
	Effect
	ForOperation(id string) Effect
}

// forOperation is e for the operation with id: e.ForOperation(id) when e is
// an OperationEffect, e itself otherwise.
func forOperation(e Effect, id string) Effect {
	if oe, ok := e.(OperationEffect); ok {
		return oe.ForOperation(id)
	}
	return e
}

// EffectURL counts with a GET of URL: the number at Path in the JSON answer
// (dot-separated object fields and array indexes, "count" or "data.total";
// an array there counts its elements). Header is sent with the GET.
type EffectURL struct {
	URL       string
	Path      string
	Header    http.Header
	Transport http.RoundTripper // http.DefaultTransport when nil
}

func (e *EffectURL) String() string { return fmt.Sprintf("GET %s, JSON %s", e.URL, e.Path) }

// ForOperation returns e with IDPlaceholder in its URL replaced by id
// (escaped for a URL).
func (e *EffectURL) ForOperation(id string) Effect {
	c := *e
	c.URL = strings.ReplaceAll(e.URL, IDPlaceholder, url.QueryEscape(id))
	return &c
}

// Count implements Effect.
func (e *EffectURL) Count(ctx context.Context) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.URL, nil)
	if err != nil {
		return 0, err
	}
	for k, vs := range e.Header {
		req.Header[k] = append([]string(nil), vs...)
	}
	rt := e.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, fmt.Errorf("effect GET %s: %w", e.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, fmt.Errorf("effect GET %s: %w", e.URL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("effect GET %s: status %d, want 200: %s", e.URL, resp.StatusCode, truncate(body, 200))
	}
	return JSONCount(body, e.Path)
}

// ErrJSONPath is wrapped by JSONCount's errors.
var ErrJSONPath = errors.New("check: JSON path")

// JSONCount returns the number at path in the JSON document doc: a number,
// a string holding an integer, or an array (its length). The path is
// dot-separated object fields and array indexes; "" or "." is the document.
func JSONCount(doc []byte, path string) (int64, error) {
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return 0, fmt.Errorf("%w %q: the answer is not JSON: %v", ErrJSONPath, path, err)
	}
	p := strings.Trim(path, ".")
	if p != "" {
		for _, elem := range strings.Split(p, ".") {
			switch x := v.(type) {
			case map[string]any:
				next, ok := x[elem]
				if !ok {
					return 0, fmt.Errorf("%w %q: no field %q (fields: %s)", ErrJSONPath, path, elem, fieldNames(x))
				}
				v = next
			case []any:
				i, err := strconv.Atoi(elem)
				if err != nil || i < 0 || i >= len(x) {
					return 0, fmt.Errorf("%w %q: %q is not an index of an array of %d", ErrJSONPath, path, elem, len(x))
				}
				v = x[i]
			default:
				return 0, fmt.Errorf("%w %q: %q is inside a %T, not an object or array", ErrJSONPath, path, elem, v)
			}
		}
	}
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n, nil
		}
		f, err := x.Float64()
		if err != nil || f != math.Trunc(f) {
			return 0, fmt.Errorf("%w %q: %s is not a whole number", ErrJSONPath, path, x)
		}
		return int64(f), nil
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w %q: string %q is not an integer", ErrJSONPath, path, x)
		}
		return n, nil
	case []any:
		return int64(len(x)), nil
	default:
		return 0, fmt.Errorf("%w %q: a %T, not a number", ErrJSONPath, path, v)
	}
}

func fieldNames(m map[string]any) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// EffectCommand counts by running a command: the integer it prints on
// standard output or, when it prints nothing, its exit status.
type EffectCommand struct {
	Name string
	Args []string
}

func (e *EffectCommand) String() string {
	return "command " + strings.Join(append([]string{e.Name}, e.Args...), " ")
}

// ForOperation returns e with IDPlaceholder in its arguments replaced by id
// (letters and digits: nothing a shell would read as syntax).
func (e *EffectCommand) ForOperation(id string) Effect {
	c := &EffectCommand{Name: e.Name, Args: make([]string, len(e.Args))}
	for i, a := range e.Args {
		c.Args[i] = strings.ReplaceAll(a, IDPlaceholder, id)
	}
	return c
}

// effectWaitDelay is how long a count whose context ended waits for the
// command's output to close (a child of the command may hold it) before it
// gives up on it.
const effectWaitDelay = time.Second

// Count implements Effect. It ends within effectWaitDelay of ctx's end, with
// ctx's error: a command killed, or cut short, counts nothing.
func (e *EffectCommand) Count(ctx context.Context) (int64, error) {
	cmd := exec.CommandContext(ctx, e.Name, e.Args...)
	cmd.WaitDelay = effectWaitDelay
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	text := strings.TrimSpace(string(out))
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return 0, fmt.Errorf("effect %s: %w", e, ctx.Err())
	case err != nil && !errors.As(err, &exit):
		return 0, fmt.Errorf("effect %s: %w", e, err)
	case exit != nil && exit.ExitCode() < 0:
		return 0, fmt.Errorf("effect %s: %w", e, err) // killed by a signal: no exit status to count
	case text == "" && exit != nil:
		return int64(exit.ExitCode()), nil
	case text == "":
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("effect %s: %w (printed %q; stderr %q)", e, err, truncate(out, 100), truncate(stderr.Bytes(), 200))
	}
	n, perr := strconv.ParseInt(text, 10, 64)
	if perr != nil {
		return 0, fmt.Errorf("effect %s printed %q, want an integer", e, truncate(out, 100))
	}
	return n, nil
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
