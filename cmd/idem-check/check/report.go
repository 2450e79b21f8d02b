package check

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// A Verdict is the outcome of one row.
type Verdict string

// The verdicts, from best to worst; Skip says the row could not be judged
// (a setting it needs was not given, or an earlier answer made it moot).
const (
	Pass Verdict = "PASS"
	Warn Verdict = "WARN"
	Fail Verdict = "FAIL"
	Skip Verdict = "SKIP"
)

// A Row is one expectation and what the server did about it.
type Row struct {
	ID string `json:"id"`
	// Method is the method the row checked (Config.Methods).
	Method   string     `json:"method,omitempty"`
	Title    string     `json:"title"`
	Verdict  Verdict    `json:"verdict"`
	Expected string     `json:"expected"`
	Got      string     `json:"got"`
	Source   string     `json:"source"`             // the draft's or Stripe's words behind the row
	Evidence []Exchange `json:"evidence,omitempty"` // the requests and answers that show it
}

// An Exchange is one request and its answer as the report shows them, with
// credentials redacted.
type Exchange struct {
	Request  string `json:"request"`
	Response string `json:"response"`
}

// A Report is the outcome of a Run.
type Report struct {
	// Method is the first of Methods, every method checked.
	Method  string   `json:"method"`
	Methods []string `json:"methods"`
	URL     string   `json:"url"`
	// Budget is the most requests the run could send to URL, announced
	// before the first; Sent is how many it sent.
	Budget int `json:"budget"`
	Sent   int `json:"sent"`
	// ReadBudget is the most effect counts the run could take, announced
	// with Budget; Reads is how many it took.
	ReadBudget int `json:"read_budget"`
	Reads      int `json:"reads"`
	// TimeBound bounds the run's Duration, announced before it started.
	TimeBound time.Duration `json:"time_bound_ns"`
	// Strict says that a WARN or a SKIP fails the run as a FAIL does.
	Strict bool `json:"strict,omitempty"`
	// Effect says how effects were counted; "" when they were not.
	Effect   string        `json:"effect,omitempty"`
	Duration time.Duration `json:"duration_ns"`
	Rows     []Row         `json:"rows"`

	uses []use // what each scenario took, beside its plan (the tests read it)
}

// Failed reports whether any row failed, or, when the run was Strict, any
// row is not a PASS.
func (r *Report) Failed() bool {
	for _, row := range r.Rows {
		if r.fails(row.Verdict) {
			return true
		}
	}
	return false
}

// fails reports whether verdict v fails the run.
func (r *Report) fails(v Verdict) bool {
	return v == Fail || r.Strict && (v == Warn || v == Skip)
}

// Counts returns how many rows have each verdict.
func (r *Report) Counts() map[Verdict]int {
	n := map[Verdict]int{}
	for _, row := range r.Rows {
		n[row.Verdict]++
	}
	return n
}

// Row returns the row with id of the first method, or nil.
func (r *Report) Row(id string) *Row {
	return r.RowOf(r.Method, id)
}

// RowOf returns the row with id of method, or nil.
func (r *Report) RowOf(method, id string) *Row {
	for i := range r.Rows {
		if r.Rows[i].ID == id && (r.Rows[i].Method == method || r.Rows[i].Method == "") {
			return &r.Rows[i]
		}
	}
	return nil
}

// label is how the text names a row: its id, after its method when the run
// checked more than one.
func (r *Report) label(row Row) string {
	if len(r.Methods) > 1 {
		return row.Method + " " + row.ID
	}
	return row.ID
}

// WriteText writes the report for a person: the table, then the words
// behind each row, then the evidence of every FAIL and WARN (of every row
// with verbose).
func (r *Report) WriteText(w io.Writer, verbose bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "idem-check %s %s: sent %d requests (at most %d announced), only to this URL",
		strings.Join(r.Methods, ","), r.URL, r.Sent, r.Budget)
	if r.Effect != "" {
		fmt.Fprintf(&b, "; effects counted with %s", r.Effect)
	}
	fmt.Fprintf(&b, "; %s (at most %s announced)\n\n", r.Duration.Round(time.Millisecond), r.TimeBound.Round(time.Millisecond))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERDICT\tCHECK\tEXPECTED\tGOT")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", row.Verdict, r.label(row), oneLine(row.Expected), oneLine(row.Got))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	n := r.Counts()
	fmt.Fprintf(&b, "\n%d PASS, %d WARN, %d FAIL, %d SKIP", n[Pass], n[Warn], n[Fail], n[Skip])
	if r.Strict {
		b.WriteString(" (strict: a WARN or a SKIP fails the run)")
	}
	b.WriteString("\n\nWhy (the words each row checks):\n")
	width := 0
	for _, row := range r.Rows {
		width = max(width, len(row.ID))
	}
	seen := map[string]bool{}
	for _, row := range r.Rows {
		if !seen[row.ID] {
			seen[row.ID] = true
			fmt.Fprintf(&b, "  %-*s %s\n", width, row.ID, row.Source)
		}
	}
	for _, row := range r.Rows {
		if len(row.Evidence) == 0 || !verbose && row.Verdict != Fail && row.Verdict != Warn {
			continue
		}
		fmt.Fprintf(&b, "\n%s %s: %s\n", row.Verdict, r.label(row), row.Got)
		for i, ex := range row.Evidence {
			fmt.Fprintf(&b, "  request %d:\n%s\n  answer %d:\n%s\n", i+1, indent(ex.Request, "    "), i+1, indent(ex.Response, "    "))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// WriteJSON writes the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

type junitSuite struct {
	XMLName  xml.Name    `xml:"testsuite"`
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes the report as a JUnit XML test suite: a test case per
// row (classname "idem-check METHOD"), FAIL as a failure, SKIP as skipped,
// WARN as a pass whose output says WARN; in a Strict run, WARN and SKIP are
// failures too.
func (r *Report) WriteJUnit(w io.Writer) error {
	s := junitSuite{Name: "idem-check " + strings.Join(r.Methods, ",") + " " + r.URL, Tests: len(r.Rows),
		Time: fmt.Sprintf("%.3f", r.Duration.Seconds())}
	for _, row := range r.Rows {
		c := junitCase{Name: row.ID, Classname: strings.TrimSpace("idem-check " + row.Method)}
		detail := fmt.Sprintf("%s\nexpected: %s\ngot: %s\nsource: %s", row.Title, row.Expected, row.Got, row.Source)
		for i, ex := range row.Evidence {
			detail += fmt.Sprintf("\nrequest %d:\n%s\nanswer %d:\n%s", i+1, ex.Request, i+1, ex.Response)
		}
		switch {
		case r.fails(row.Verdict):
			s.Failures++
			msg := row.Got
			if row.Verdict != Fail {
				msg = string(row.Verdict) + " (strict): " + msg
			}
			c.Failure = &junitMessage{Message: msg, Text: detail}
		case row.Verdict == Skip:
			s.Skipped++
			c.Skipped = &junitMessage{Message: row.Got}
		default:
			c.SystemOut = string(row.Verdict) + ": " + detail
		}
		s.Cases = append(s.Cases, c)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(s); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
