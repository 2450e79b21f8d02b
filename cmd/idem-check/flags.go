package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem/cmd/idem-check/check"
)

// options are the parsed command line.
type options struct {
	cfg      check.Config
	json     bool
	jsonFile string
	junit    string
	verbose  bool
	version  bool
}

// errUsage marks a command line that cannot run: exit status 2.
var errUsage = errors.New("usage")

// headerList is a repeatable -H style flag: "Name: value".
type headerList struct{ h http.Header }

func (l *headerList) String() string { return "" }

func (l *headerList) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	if !ok {
		return fmt.Errorf("%q: want 'Name: value'", s)
	}
	name = strings.TrimSpace(name)
	if !validToken(name) {
		return fmt.Errorf("%q: %q is not a header name", s, name)
	}
	value = strings.TrimSpace(value)
	if strings.ContainsAny(value, "\r\n\x00") {
		return fmt.Errorf("%q: a header value cannot hold CR, LF or NUL", s)
	}
	if l.h == nil {
		l.h = http.Header{}
	}
	l.h.Add(name, value)
	return nil
}

// validToken reports whether s is an RFC 9110 token (a field name).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// readBody reads a body flag: @file reads the file, anything else is the
// body itself.
func readBody(flagName, v string) ([]byte, error) {
	if name, ok := strings.CutPrefix(v, "@"); ok {
		if name == "" {
			return nil, fmt.Errorf("-%s @: no file name after @", flagName)
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("-%s %s: %w", flagName, v, err)
		}
		return b, nil
	}
	return []byte(v), nil
}

// checkURL wants an absolute http or https URL with a host.
func checkURL(flagName, v string) error {
	u, err := url.Parse(v)
	if err != nil {
		return fmt.Errorf("-%s %q: %v", flagName, v, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("-%s %q: want an http:// or https:// URL", flagName, v)
	}
	if u.Host == "" {
		return fmt.Errorf("-%s %q: no host", flagName, v)
	}
	return nil
}

// defaultReplayAfter is when the replay-after row retries its key when
// -replay-after is not given: a few seconds, so that a run with no flag but
// -url checks that a record outlives its request (a server whose records
// vanish after a second FAILs it), within the run's announced bound. Against
// a -ttl under twice as long, the row waits half the -ttl instead.
const defaultReplayAfter = 5 * time.Second

// flagSet reports whether the command line gave the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// parseFlags reads the command line. A bad one is an error wrapping
// errUsage (flag.ErrHelp for -h), its message already written to stderr.
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("idem-check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o                                           options
		headers, other, slow, leaseH, fail, effectH headerList
		rawURL, method, body, body2                 string
		effectURL, effectJSON, effectCmd            string
	)
	fs.StringVar(&rawURL, "url", "", "the operation's URL (required); every request goes to it")
	fs.StringVar(&method, "X", http.MethodPost, "the operation's method, or a comma list of the methods it accepts (every row runs for each), e.g. POST,PUT")
	fs.StringVar(&body, "body", "", "the request body, or @file; each {{id}} in it becomes an id unique to the operation")
	fs.StringVar(&body2, "body2", "", "another body for the mismatch row, or @file (default: derived from a JSON -body)")
	fs.Var(&headers, "H", "a header sent on every request, 'Name: value' (repeatable): credentials, Content-Type")
	fs.Var(&other, "H2", "a header of a second principal, replacing the -H of that name for the scope row (repeatable)")
	fs.Var(&slow, "slow-H", "a header that makes the handler slow, for the in-progress rows (repeatable), e.g. 'Chaos-Delay: 2s'")
	fs.Var(&leaseH, "lease-H", "a header that makes the handler outlast the server's lease (lock), for the lease row (repeatable; default: the -slow-H headers), e.g. 'Chaos-Delay: 8s' for idem-server -lock-ttl 5s")
	fs.DurationVar(&o.cfg.Lease, "lease", 0, "the longest lease (claim, lock) the server documents; the lease row is skipped when the -lease-H handler does not outlast it")
	fs.Var(&fail, "fail-H", "a header that makes the handler answer 5xx, for the 5xx row (repeatable), e.g. 'Chaos-Fail: 500'")
	fs.DurationVar(&o.cfg.TTL, "ttl", 0, "the server's documented key expiry, for the expiry row (it waits this long plus -ttl-margin, within -max-wait) and the retention-window row")
	fs.DurationVar(&o.cfg.TTLMargin, "ttl-margin", time.Second, "added to -ttl before the expiry row's retry")
	fs.DurationVar(&o.cfg.ReplayAfter, "replay-after", defaultReplayAfter,
		"a time after which the server still keeps a record, for the replay-after row (shorter than -ttl; default half of a -ttl under 10s; 0: no such row)")
	fs.DurationVar(&o.cfg.MaxWait, "max-wait", 0, "the most the run waits on purpose, for the expiry and retention rows (default 1h plus -ttl-margin)")
	fs.DurationVar(&o.cfg.MaxTime, "max-time", 0, "the most the whole run takes; rows not judged by then are skipped (default 10m plus the planned waits)")
	fs.BoolVar(&o.cfg.Strict, "strict", false, "a WARN or a SKIP fails the run (exit status 1), as a FAIL does")
	fs.StringVar(&o.cfg.KeyHeader, "key-header", "Idempotency-Key", "the key's header name")
	fs.StringVar(&o.cfg.ReplayHeader, "replay-header", "Idempotent-Replayed", "the header that marks a replay")
	fs.IntVar(&o.cfg.PreferWait, "prefer-wait", 1, "N of Prefer: wait=N in the second in-progress row")
	fs.BoolVar(&o.cfg.Chaos, "chaos", false, "add the chaos rows: lost answers and concurrent duplicates through a loopback proxy (needs an effect)")
	fs.IntVar(&o.cfg.Duplicates, "duplicates", 4, "concurrent same-key requests in the chaos rows (at most 32)")
	fs.IntVar(&o.cfg.Operations, "operations", 2, "operations per chaos row (at most 20)")
	fs.StringVar(&effectURL, "effect-url", "", "count effects with a GET of this URL (with -effect-json)")
	fs.StringVar(&effectJSON, "effect-json", "", "the JSON path of the count in -effect-url's answer, e.g. count or data.total")
	fs.Var(&effectH, "effect-H", "a header of the -effect-url GET (repeatable; default: the -H headers)")
	fs.StringVar(&effectCmd, "effect-cmd", "", "count effects with a shell command: the integer it prints, or its exit status")
	fs.DurationVar(&o.cfg.Timeout, "timeout", 30*time.Second, "bound of each request")
	fs.BoolVar(&o.json, "json", false, "write the report as JSON instead of the table")
	fs.StringVar(&o.jsonFile, "json-file", "", "also write the report as JSON to this file (the table still goes to standard output)")
	fs.StringVar(&o.junit, "junit", "", "also write the report as JUnit XML to this file")
	fs.BoolVar(&o.verbose, "v", false, "show the requests and answers of every row, not only of FAIL and WARN")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: idem-check -url URL [-body @file] [-H 'Name: value']... [flags]\n\n"+
			"Checks how one operation honours Idempotency-Key and prints a row per expectation.\n"+
			"Exit status: 0 no FAIL, 1 a FAIL or an error, 2 a bad command line.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if o.version {
		return &o, nil
	}
	fail2 := func(format string, a ...any) (*options, error) {
		err := fmt.Errorf(format, a...)
		fmt.Fprintf(stderr, "idem-check: %v (see idem-check -h)\n", err)
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fail2("unexpected argument %q", fs.Arg(0))
	}
	if rawURL == "" {
		return fail2("-url is required")
	}
	if err := checkURL("url", rawURL); err != nil {
		return fail2("%v", err)
	}
	var methods []string
	for _, m := range strings.Split(method, ",") {
		m = strings.TrimSpace(m)
		if !validToken(m) {
			return fail2("-X %q: %q is not a method", method, m)
		}
		if slices.Contains(methods, strings.ToUpper(m)) {
			return fail2("-X %q: %s given twice", method, m)
		}
		methods = append(methods, strings.ToUpper(m))
	}
	var err error
	if o.cfg.Body, err = readBody("body", body); err != nil {
		return fail2("%v", err)
	}
	if o.cfg.OtherBody, err = readBody("body2", body2); err != nil {
		return fail2("%v", err)
	}
	if body2 != "" && string(o.cfg.OtherBody) == string(o.cfg.Body) {
		return fail2("-body2 is the same as -body")
	}
	if !validToken(o.cfg.KeyHeader) || !validToken(o.cfg.ReplayHeader) {
		return fail2("-key-header and -replay-header must be header names")
	}
	if o.cfg.TTL < 0 {
		return fail2("-ttl %v: want 0 (no expiry row) or a positive duration", o.cfg.TTL)
	}
	if o.cfg.TTLMargin <= 0 {
		return fail2("-ttl-margin %v: want a positive duration", o.cfg.TTLMargin)
	}
	if o.cfg.TTL > time.Hour && o.cfg.MaxWait == 0 {
		return fail2("-ttl %v is more than an hour: give -max-wait, the most the run may wait on purpose (the expiry row needs %v; the retention rows fit in any)",
			o.cfg.TTL, o.cfg.TTL+o.cfg.TTLMargin)
	}
	if !flagSet(fs, "replay-after") && o.cfg.TTL > 0 && o.cfg.TTL <= 2*defaultReplayAfter {
		o.cfg.ReplayAfter = o.cfg.TTL / 2 // the default would not fit in the retention given
	}
	if o.cfg.ReplayAfter < 0 || o.cfg.TTL > 0 && o.cfg.ReplayAfter >= o.cfg.TTL {
		return fail2("-replay-after %v: want a positive duration shorter than -ttl %v", o.cfg.ReplayAfter, o.cfg.TTL)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"max-wait", o.cfg.MaxWait}, {"max-time", o.cfg.MaxTime}, {"lease", o.cfg.Lease}} {
		if d.v < 0 {
			return fail2("-%s %v: want a positive duration", d.name, d.v)
		}
	}
	if o.cfg.PreferWait < 1 {
		return fail2("-prefer-wait %d: want at least 1", o.cfg.PreferWait)
	}
	if o.cfg.Duplicates < 2 || o.cfg.Duplicates > 32 {
		return fail2("-duplicates %d: want 2 to 32", o.cfg.Duplicates)
	}
	if o.cfg.Operations < 1 || o.cfg.Operations > 20 {
		return fail2("-operations %d: want 1 to 20", o.cfg.Operations)
	}
	if o.cfg.Timeout <= 0 {
		return fail2("-timeout %v: want a positive duration", o.cfg.Timeout)
	}
	switch {
	case effectURL != "" && effectCmd != "":
		return fail2("give -effect-url or -effect-cmd, not both")
	case effectURL != "":
		if err := checkURL("effect-url", effectURL); err != nil {
			return fail2("%v", err)
		}
		if effectJSON == "" {
			return fail2("-effect-url needs -effect-json (the path of the count; . for the whole answer)")
		}
		h := effectH.h
		if h == nil {
			h = headers.h.Clone()
		}
		o.cfg.Effect = &check.EffectURL{URL: effectURL, Path: effectJSON, Header: h}
	case effectCmd != "":
		o.cfg.Effect = &check.EffectCommand{Name: "sh", Args: []string{"-c", effectCmd}}
	case effectJSON != "" || effectH.h != nil:
		return fail2("-effect-json and -effect-H need -effect-url")
	}
	if o.cfg.Chaos && o.cfg.Effect == nil {
		return fail2("-chaos counts effects: give -effect-url with -effect-json, or -effect-cmd")
	}
	if (strings.Contains(effectURL, check.IDPlaceholder) || strings.Contains(effectCmd, check.IDPlaceholder)) &&
		!strings.Contains(string(o.cfg.Body), check.IDPlaceholder) {
		return fail2("the effect count names %s, but -body has none: it would count no operation", check.IDPlaceholder)
	}
	if o.json && o.jsonFile != "" {
		return fail2("give -json (the report on standard output) or -json-file, not both")
	}
	o.cfg.URL = rawURL
	o.cfg.Method = methods[0]
	o.cfg.Methods = methods
	o.cfg.Header = headers.h
	o.cfg.OtherPrincipal = other.h
	o.cfg.Slow = slow.h
	o.cfg.Fail = fail.h
	o.cfg.LeaseSlow = leaseH.h
	return &o, nil
}
