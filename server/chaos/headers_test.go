package chaos

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

func TestParseHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		h       http.Header
		want    plan
		wantErr string // header named in the error; "" for success
	}{
		{"none", http.Header{}, plan{retryAfter: -1}, ""},
		{"delay", http.Header{"Chaos-Delay": {"800ms"}}, plan{delay: 800 * time.Millisecond, delaySet: true, retryAfter: -1}, ""},
		{"zero delay", http.Header{"Chaos-Delay": {"0s"}}, plan{delaySet: true, retryAfter: -1}, ""},
		{"max delay", http.Header{"Chaos-Delay": {"1m"}}, plan{delay: time.Minute, delaySet: true, retryAfter: -1}, ""},
		{"delay after write", http.Header{"Chaos-Delay-After-Write": {"800ms"}}, plan{afterWrite: 800 * time.Millisecond, retryAfter: -1}, ""},
		{"zero delay after write", http.Header{"Chaos-Delay-After-Write": {"0s"}}, plan{retryAfter: -1}, ""},
		{"max delay after write", http.Header{"Chaos-Delay-After-Write": {"1m"}}, plan{afterWrite: time.Minute, retryAfter: -1}, ""},
		{"both delays", http.Header{"Chaos-Delay": {"1s"}, "Chaos-Delay-After-Write": {"2s"}},
			plan{delay: time.Second, delaySet: true, afterWrite: 2 * time.Second, retryAfter: -1}, ""},
		{"fail", http.Header{"Chaos-Fail": {"503"}}, plan{fail: 503, retryAfter: -1}, ""},
		{"fail 400", http.Header{"Chaos-Fail": {"400"}}, plan{fail: 400, retryAfter: -1}, ""},
		{"fail with retry-after", http.Header{"Chaos-Fail": {"429"}, "Chaos-Retry-After": {"7"}}, plan{fail: 429, retryAfter: 7}, ""},
		{"fail with retry-after 0", http.Header{"Chaos-Fail": {"503"}, "Chaos-Retry-After": {"0"}}, plan{fail: 503, retryAfter: 0}, ""},
		{"crash", http.Header{"Chaos-Crash": {"after-write"}}, plan{crash: true, retryAfter: -1}, ""},
		{"drop", http.Header{"Chaos-Drop": {"after-record"}}, plan{drop: true, retryAfter: -1}, ""},
		{"all but fail", http.Header{"Chaos-Delay": {"1s"}, "Chaos-Crash": {"after-write"}, "Chaos-Drop": {"after-record"}},
			plan{delay: time.Second, delaySet: true, crash: true, drop: true, retryAfter: -1}, ""},

		{"delay not a duration", http.Header{"Chaos-Delay": {"800"}}, plan{}, HeaderDelay},
		{"delay negative", http.Header{"Chaos-Delay": {"-1s"}}, plan{}, HeaderDelay},
		{"delay too long", http.Header{"Chaos-Delay": {"61s"}}, plan{}, HeaderDelay},
		{"delay empty", http.Header{"Chaos-Delay": {""}}, plan{}, HeaderDelay},
		{"delay twice", http.Header{"Chaos-Delay": {"1s", "2s"}}, plan{}, HeaderDelay},
		{"delay after write not a duration", http.Header{"Chaos-Delay-After-Write": {"800"}}, plan{}, HeaderDelayAfterWrite},
		{"delay after write negative", http.Header{"Chaos-Delay-After-Write": {"-1ms"}}, plan{}, HeaderDelayAfterWrite},
		{"delay after write too long", http.Header{"Chaos-Delay-After-Write": {"1m0.000000001s"}}, plan{}, HeaderDelayAfterWrite},
		{"delay after write empty", http.Header{"Chaos-Delay-After-Write": {""}}, plan{}, HeaderDelayAfterWrite},
		{"delay after write spaced", http.Header{"Chaos-Delay-After-Write": {" 1s"}}, plan{}, HeaderDelayAfterWrite},
		{"delay after write twice", http.Header{"Chaos-Delay-After-Write": {"1s", "1s"}}, plan{}, HeaderDelayAfterWrite},
		{"delay after write bad beside a good delay", http.Header{"Chaos-Delay": {"1s"}, "Chaos-Delay-After-Write": {"later"}}, plan{}, HeaderDelayAfterWrite},
		{"fail 200", http.Header{"Chaos-Fail": {"200"}}, plan{}, HeaderFail},
		{"fail 600", http.Header{"Chaos-Fail": {"600"}}, plan{}, HeaderFail},
		{"fail signed", http.Header{"Chaos-Fail": {"+503"}}, plan{}, HeaderFail},
		{"fail text", http.Header{"Chaos-Fail": {"oops"}}, plan{}, HeaderFail},
		{"fail spaced", http.Header{"Chaos-Fail": {" 503"}}, plan{}, HeaderFail},
		{"retry-after alone", http.Header{"Chaos-Retry-After": {"1"}}, plan{}, HeaderRetryAfter},
		{"retry-after negative", http.Header{"Chaos-Fail": {"503"}, "Chaos-Retry-After": {"-1"}}, plan{}, HeaderRetryAfter},
		{"retry-after too big", http.Header{"Chaos-Fail": {"503"}, "Chaos-Retry-After": {"86401"}}, plan{}, HeaderRetryAfter},
		{"retry-after date", http.Header{"Chaos-Fail": {"503"}, "Chaos-Retry-After": {"Wed, 21 Oct 2015 07:28:00 GMT"}}, plan{}, HeaderRetryAfter},
		{"crash other", http.Header{"Chaos-Crash": {"before-write"}}, plan{}, HeaderCrash},
		{"crash case", http.Header{"Chaos-Crash": {"After-Write"}}, plan{}, HeaderCrash},
		{"drop other", http.Header{"Chaos-Drop": {"yes"}}, plan{}, HeaderDrop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseHeaders(tt.h)
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("parseHeaders = %+v, %v; want %+v", got, err, tt.want)
				}
				return
			}
			var he *HeaderError
			if !errors.As(err, &he) || he.Header != tt.wantErr || !errors.Is(err, ErrBadHeader) {
				t.Fatalf("err = %v, want a HeaderError for %s", err, tt.wantErr)
			}
			if got != (plan{}) {
				t.Errorf("plan on error = %+v", got)
			}
		})
	}
}

// FuzzParseHeaders checks that any header values parse without panicking into
// a plan within the documented bounds, or fail with a HeaderError.
func FuzzParseHeaders(f *testing.F) {
	f.Add("800ms", "800ms", "503", "1", "after-write", "after-record")
	f.Add("", "", "", "", "", "")
	f.Add("1h", "-1s", "99999", "-1", "x", "y")
	f.Add("9223372036854775807ns", "1m0s", "0503", "000001", "after-write ", "")
	f.Fuzz(func(t *testing.T, delay, afterWrite, fail, retryAfter, crash, drop string) {
		h := http.Header{}
		for name, v := range map[string]string{HeaderDelay: delay, HeaderDelayAfterWrite: afterWrite, HeaderFail: fail,
			HeaderRetryAfter: retryAfter, HeaderCrash: crash, HeaderDrop: drop} {
			if v != "" {
				h.Set(name, v)
			}
		}
		p, err := parseHeaders(h)
		if err != nil {
			var he *HeaderError
			if !errors.As(err, &he) || !errors.Is(err, ErrBadHeader) || he.Error() == "" {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		switch {
		case p.delay < 0 || p.delay > MaxDelay:
			t.Fatalf("delay %v out of bounds", p.delay)
		case p.afterWrite < 0 || p.afterWrite > MaxDelay:
			t.Fatalf("delay after write %v out of bounds", p.afterWrite)
		case p.fail != 0 && (p.fail < 400 || p.fail > 599):
			t.Fatalf("fail %d out of bounds", p.fail)
		case p.retryAfter < -1 || p.retryAfter > MaxRetryAfter || (p.retryAfter >= 0 && p.fail == 0):
			t.Fatalf("retryAfter %d with fail %d", p.retryAfter, p.fail)
		case p.crash != (crash != ""), p.drop != (drop != ""):
			t.Fatalf("crash/drop %v/%v from %q/%q", p.crash, p.drop, crash, drop)
		}
	})
}
