package check

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Config says which operation to check and how. URL and Body are required;
// every other field has a default or, left empty, makes the rows that need it
// SKIP with a message saying which setting they need.
type Config struct {
	// URL is the one operation checked: every request of the run goes to it
	// (chaos mode through a loopback proxy in front of it), and to nothing
	// else but Effect's URL.
	URL string
	// Method is the operation's method; POST when empty.
	Method string
	// Methods are the methods the operation accepts: every row runs once
	// for each, in this order. Empty: Method alone.
	Methods []string
	// Body is the request body of the operation. It is a template: each
	// {{id}} in it (IDPlaceholder) is replaced by an id unique to the
	// operation (one idempotency key), so that an Effect can count that one
	// operation (EffectURL and EffectCommand replace {{id}} too).
	Body []byte
	// OtherBody is a different body for the mismatch row (a template like
	// Body). Empty: derived from Body when Body is a JSON object (a number in
	// it incremented, or a field added), otherwise the row is skipped.
	OtherBody []byte
	// Header is sent on every request: the credentials of the first
	// principal, Content-Type, ...
	Header http.Header
	// OtherPrincipal replaces, for the scope row, the headers of Header it
	// names (the second principal's credentials). Empty: that row is skipped.
	OtherPrincipal http.Header
	// Slow is added to the first request of the in-progress rows to make the
	// handler slow (for idem-server: Chaos-Delay: 2s). Empty: skipped.
	Slow http.Header
	// Fail is added to the first request of the 5xx row to make the handler
	// answer 5xx (for idem-server: Chaos-Fail: 500). Empty: skipped.
	Fail http.Header
	// LeaseSlow is added to the first request of the in-progress-lease row:
	// a handler slower than any lease (claim, lock) the server may hold
	// (idem-server: Chaos-Delay: 8s against a -lock-ttl of 5s; the delay
	// must also end within the server's request time-out). Empty: Slow.
	LeaseSlow http.Header
	// Lease is the longest lease the server documents; the lease row is
	// skipped when the LeaseSlow handler did not outlast it. Zero: unknown.
	Lease time.Duration
	// LeaseStep is how often the lease row sends a duplicate while the
	// first request runs; 1s when zero (a quarter of Lease when that is
	// shorter, at least 50ms).
	LeaseStep time.Duration
	// TTL is how long the server says it keeps a record: the expiry row
	// waits TTL+TTLMargin, then expects the key to be new again, and the
	// retention-window row expects a replay at times spread over it (up to
	// TTL-TTLMargin). Zero: both skipped.
	TTL time.Duration
	// TTLMargin is added to TTL before the expiry row's retry, and taken
	// from it at the end of the retention window; 1s when zero.
	TTLMargin time.Duration
	// ReplayAfter is when the replay-after row retries a key: it expects
	// the replay then. It must be shorter than TTL. Zero: skipped.
	ReplayAfter time.Duration
	// MaxWait bounds the time the run waits on purpose (the expiry and
	// retention rows, which share one schedule): a row whose wait does not
	// fit is skipped and says so, and the retention window ends where the
	// budget does. Zero: one hour plus TTLMargin.
	MaxWait time.Duration
	// MaxTime bounds the whole run: past it, the rows not yet judged are
	// skipped. Zero: 10 minutes plus the planned waits. PlanBound
	// announces it.
	MaxTime time.Duration
	// Strict makes a WARN or a SKIP fail the run (Report.Failed), as a FAIL
	// does.
	Strict bool
	// KeyHeader is the key's header name; Idempotency-Key when empty.
	KeyHeader string
	// ReplayHeader is the header a replay carries; Idempotent-Replayed when
	// empty. Its absence on a replay is a WARN, never a FAIL.
	ReplayHeader string
	// Grace is how long the in-progress rows wait, once the first request
	// is sent, before they send the duplicate, so that the first reaches the
	// handler first; 200ms when zero. (Either order is judged right; only the
	// Prefer: wait row needs this one.)
	Grace time.Duration
	// PreferWait is the N of "Prefer: wait=N" in the second in-progress row;
	// 1 when zero.
	PreferWait int
	// Effect counts the operation's effects (payments made, rows written).
	// Nil: the replay-effect row and the chaos rows are skipped, and the
	// in-progress rows judge from the responses alone.
	Effect Effect
	// Chaos adds the chaos rows: responses lost after the server acted and
	// concurrent duplicates, through a loopback proxy, counting Effect.
	Chaos bool
	// Duplicates is how many same-key requests the chaos rows send at once;
	// 4 when zero.
	Duplicates int
	// Operations is how many operations each chaos row runs; 2 when zero.
	Operations int
	// Timeout bounds each request; 30s when zero.
	Timeout time.Duration
	// Transport sends the requests; a clone of http.DefaultTransport when nil.
	// It must not retry on its own.
	Transport http.RoundTripper

	// NewKey returns a fresh idempotency key; a random UUID (version 4) when
	// nil, as the draft recommends.
	NewKey func() string
	// Sleep waits d or until ctx ends (the expiry row's wait); a timer when nil.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock of the timings reported; time.Now when nil.
	Now func() time.Time
}

// ErrConfig is wrapped by every error Run returns for a Config it cannot use.
var ErrConfig = errors.New("check: invalid configuration")

func (c *Config) withDefaults() (Config, error) {
	cfg := *c
	if cfg.URL == "" {
		return cfg, fmt.Errorf("%w: URL is empty", ErrConfig)
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return cfg, fmt.Errorf("%w: URL %q: %v", ErrConfig, cfg.URL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return cfg, fmt.Errorf("%w: URL %q: want an absolute http:// or https:// URL", ErrConfig, cfg.URL)
	}
	if cfg.Method == "" {
		cfg.Method = http.MethodPost
	}
	cfg.Method = strings.ToUpper(cfg.Method)
	if len(cfg.Methods) == 0 {
		cfg.Methods = []string{cfg.Method}
	}
	methods := make([]string, 0, len(cfg.Methods))
	for _, m := range cfg.Methods {
		m = strings.ToUpper(m)
		if !validToken(m) {
			return cfg, fmt.Errorf("%w: method %q is not an HTTP token", ErrConfig, m)
		}
		if slices.Contains(methods, m) {
			return cfg, fmt.Errorf("%w: method %s given twice", ErrConfig, m)
		}
		methods = append(methods, m)
	}
	cfg.Methods, cfg.Method = methods, methods[0]
	if cfg.KeyHeader == "" {
		cfg.KeyHeader = "Idempotency-Key"
	}
	if cfg.ReplayHeader == "" {
		cfg.ReplayHeader = "Idempotent-Replayed"
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 200 * time.Millisecond
	}
	if cfg.PreferWait <= 0 {
		cfg.PreferWait = 1
	}
	if cfg.TTL < 0 {
		return cfg, fmt.Errorf("%w: TTL %v is negative", ErrConfig, cfg.TTL)
	}
	if cfg.TTLMargin <= 0 {
		cfg.TTLMargin = time.Second
	}
	if cfg.ReplayAfter < 0 || cfg.TTL > 0 && cfg.ReplayAfter >= cfg.TTL {
		return cfg, fmt.Errorf("%w: ReplayAfter %v: want a positive duration shorter than TTL %v", ErrConfig, cfg.ReplayAfter, cfg.TTL)
	}
	if cfg.MaxWait < 0 || cfg.MaxTime < 0 || cfg.Lease < 0 || cfg.LeaseStep < 0 {
		return cfg, fmt.Errorf("%w: MaxWait, MaxTime, Lease and LeaseStep cannot be negative", ErrConfig)
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = time.Hour + cfg.TTLMargin
	}
	if len(cfg.LeaseSlow) == 0 {
		cfg.LeaseSlow = cfg.Slow
	}
	if cfg.LeaseStep == 0 {
		cfg.LeaseStep = time.Second
		if cfg.Lease > 0 {
			cfg.LeaseStep = min(cfg.LeaseStep, max(cfg.Lease/4, 50*time.Millisecond))
		}
	}
	if cfg.Duplicates <= 0 {
		cfg.Duplicates = 4
	}
	if cfg.Duplicates > 32 {
		return cfg, fmt.Errorf("%w: Duplicates %d: at most 32", ErrConfig, cfg.Duplicates)
	}
	if cfg.Operations <= 0 {
		cfg.Operations = 2
	}
	if cfg.Operations > 20 {
		return cfg, fmt.Errorf("%w: Operations %d: at most 20", ErrConfig, cfg.Operations)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if cfg.NewKey == nil {
		cfg.NewKey = randomKey
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Header == nil {
		cfg.Header = http.Header{}
	}
	if len(cfg.OtherBody) == 0 {
		cfg.OtherBody = deriveOtherBody(cfg.Body)
	}
	return cfg, nil
}

// validToken reports whether s is an RFC 9110 token (a method or a field
// name).
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

// randomKey is a random UUID (version 4), the key the draft recommends.
func randomKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
