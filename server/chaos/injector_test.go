package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/server"
)

func mustNew(t *testing.T, opts ...Option) *Injector {
	t.Helper()
	return New(opts...)
}

// fixedRand returns the given numbers in turn, then 0.99.
func fixedRand(xs ...float64) func() float64 {
	var i atomic.Int64
	return func() float64 {
		n := int(i.Add(1)) - 1
		if n < len(xs) {
			return xs[n]
		}
		return 0.99
	}
}

func TestBadOptionsPanicWhenCreated(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		make func()
		want string
	}{
		{"fail rate above 1", func() { WithFailRate(1.5) }, "chaos: WithFailRate(1.5): want 0 <= p <= 1"},
		{"fail rate negative", func() { WithFailRate(-0.1) }, "chaos: WithFailRate(-0.1): want 0 <= p <= 1"},
		{"drop rate NaN", func() { WithDropRate(nan()) }, "chaos: WithDropRate(NaN): want 0 <= p <= 1"},
		{"delay negative", func() { WithDelayMax(-time.Second) }, "chaos: WithDelayMax(-1s): want 0 <= d <= 1m0s"},
		{"delay too long", func() { WithDelayMax(time.Hour) }, "chaos: WithDelayMax(1h0m0s): want 0 <= d <= 1m0s"},
		{"nil rand", func() { WithRand(nil) }, "chaos: WithRand(nil): want a function"},
		{"nil crash", func() { WithCrash(nil) }, "chaos: WithCrash(nil): want a function"},
		{"nil option", func() { New(nil) }, "chaos: New(nil Option): want an Option"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				if r := recover(); r != tt.want {
					t.Errorf("panic %#v, want %q", r, tt.want)
				}
			}()
			tt.make()
		})
	}
}

func nan() float64 {
	zero := 0.0
	return zero / zero
}

// serve runs one request with headers h through in.Wrap around a handler that
// calls the hooks like payments.API does, and counts its business writes.
func serve(in *Injector, h http.Header, writes *atomic.Int32) *httptest.ResponseRecorder {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := in.BeforeWrite(r); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		writes.Add(1)
		in.AfterWrite(r)
		w.WriteHeader(http.StatusCreated)
	})
	r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader("{}"))
	for k, vs := range h {
		r.Header[k] = vs
	}
	rec := httptest.NewRecorder()
	in.Wrap(next).ServeHTTP(rec, r)
	return rec
}

func TestWrapAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		opts           []Option
		h              http.Header
		wantStatus     int
		wantType       string
		wantRetryAfter string
		wantDetail     string
		wantWrites     int32
	}{
		{"no fault", nil, nil, 201, "", "", "", 1},
		{"fail", nil, http.Header{"Chaos-Fail": {"500"}}, 500, ProblemInjected, "", "500", 0},
		{"fail with retry-after", nil, http.Header{"Chaos-Fail": {"503"}, "Chaos-Retry-After": {"2"}}, 503, ProblemInjected, "2", "503", 0},
		{"fail with retry-after 0", nil, http.Header{"Chaos-Fail": {"429"}, "Chaos-Retry-After": {"0"}}, 429, ProblemInjected, "0", "429", 0},
		{"bad header", nil, http.Header{"Chaos-Delay": {"soon"}}, 400, ProblemBadHeader, "", "Chaos-Delay", 0},
		{"bad delay after write", nil, http.Header{"Chaos-Delay-After-Write": {"61s"}}, 400, ProblemBadHeader, "", "Chaos-Delay-After-Write", 0},
		{"bad header beside a fail", nil, http.Header{"Chaos-Fail": {"503"}, "Chaos-Drop": {"now"}}, 400, ProblemBadHeader, "", "Chaos-Drop", 0},
		{"headers off", []Option{WithHeaders(false)}, http.Header{"Chaos-Fail": {"503"}, "Chaos-Delay": {"soon"}}, 201, "", "", "", 1},
		{"random fail", []Option{WithFailRate(0.5), WithRand(fixedRand(0.49))}, nil, 503, ProblemInjected, "1", "503", 0},
		{"random fail missed", []Option{WithFailRate(0.5), WithRand(fixedRand(0.5))}, nil, 201, "", "", "", 1},
		{"header fail wins over random", []Option{WithFailRate(1)}, http.Header{"Chaos-Fail": {"502"}}, 502, ProblemInjected, "", "502", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var writes atomic.Int32
			rec := serve(mustNew(t, tt.opts...), tt.h, &writes)
			if rec.Code != tt.wantStatus || writes.Load() != tt.wantWrites {
				t.Fatalf("status %d writes %d, want %d and %d", rec.Code, writes.Load(), tt.wantStatus, tt.wantWrites)
			}
			if got := rec.Header().Get("Retry-After"); got != tt.wantRetryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tt.wantRetryAfter)
			}
			if tt.wantType == "" {
				return
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type = %q", ct)
			}
			var p server.Problem
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatal(err)
			}
			if p.Type != tt.wantType || p.Status != tt.wantStatus || !strings.Contains(p.Detail, tt.wantDetail) {
				t.Errorf("problem = %+v, want type %s, detail naming %q", p, tt.wantType, tt.wantDetail)
			}
		})
	}
}

func TestDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts []Option
		h    http.Header
		want time.Duration
	}{
		{"header", nil, http.Header{"Chaos-Delay": {"800ms"}}, 800 * time.Millisecond},
		{"random", []Option{WithDelayMax(time.Second), WithRand(fixedRand(0.25))}, nil, 250 * time.Millisecond},
		{"header 0s beats random", []Option{WithDelayMax(time.Second), WithRand(fixedRand(0.25))}, http.Header{"Chaos-Delay": {"0s"}}, 0},
		{"none", nil, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var writes atomic.Int32
				if rec := serve(mustNew(t, tt.opts...), tt.h, &writes); rec.Code != http.StatusCreated {
					t.Fatalf("status %d", rec.Code)
				}
				if got := time.Since(start); got != tt.want {
					t.Errorf("delayed %v, want %v", got, tt.want)
				}
			})
		})
	}
}

func TestDelayEndsWithTheRequest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		in := mustNew(t)
		ctx, cancel := context.WithCancel(context.Background())
		var gotErr error
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { gotErr = in.BeforeWrite(r) })
		r := httptest.NewRequest(http.MethodPost, "/", nil).WithContext(ctx)
		r.Header.Set(HeaderDelay, "1m")
		time.AfterFunc(time.Second, cancel)
		start := time.Now()
		in.Wrap(next).ServeHTTP(httptest.NewRecorder(), r)
		if !errors.Is(gotErr, context.Canceled) || time.Since(start) != time.Second {
			t.Errorf("BeforeWrite = %v after %v, want context.Canceled after 1s", gotErr, time.Since(start))
		}
	})
}

// TestDelayAfterWrite checks that the after-write delay follows the write,
// lasts its full length although the request's context ends first, and comes
// before a crash asked for with it.
func TestDelayAfterWrite(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		h         http.Header
		want      time.Duration
		wantCrash bool
	}{
		{"delay", http.Header{"Chaos-Delay-After-Write": {"1m"}}, time.Minute, false},
		{"zero", http.Header{"Chaos-Delay-After-Write": {"0s"}}, 0, false},
		{"then crash", http.Header{"Chaos-Delay-After-Write": {"30s"}, "Chaos-Crash": {"after-write"}}, 30 * time.Second, true},
		{"with a delay before the write", http.Header{"Chaos-Delay": {"1s"}, "Chaos-Delay-After-Write": {"2s"}}, 3 * time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var wroteAt, crashedAt time.Duration
				in := mustNew(t, WithCrash(func() { crashedAt = time.Since(start) }))
				ctx, cancel := context.WithCancel(context.Background())
				// The client hangs up a second after the write.
				next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if err := in.BeforeWrite(r); err != nil {
						w.WriteHeader(http.StatusServiceUnavailable)
						return
					}
					wroteAt = time.Since(start)
					time.AfterFunc(time.Second, cancel)
					in.AfterWrite(r)
					w.WriteHeader(http.StatusCreated)
				})
				r := httptest.NewRequest(http.MethodPost, "/", nil).WithContext(ctx)
				for k, vs := range tt.h {
					r.Header[k] = vs
				}
				rec := httptest.NewRecorder()
				in.Wrap(next).ServeHTTP(rec, r)
				defer cancel()
				if got := time.Since(start) - wroteAt; rec.Code != http.StatusCreated || time.Since(start) != tt.want || got > tt.want {
					t.Errorf("status %d after %v (%v after the write), want 201 after %v", rec.Code, time.Since(start), got, tt.want)
				}
				if tt.wantCrash && crashedAt != tt.want {
					t.Errorf("crashed at %v, want after the delay, at %v", crashedAt, tt.want)
				}
			})
		})
	}
}

func TestCrash(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		h          http.Header
		wantCrash  bool
		wantWrites int32
	}{
		{"asked", http.Header{"Chaos-Crash": {"after-write"}}, true, 1},
		{"not asked", nil, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var crashed atomic.Bool
			var writes atomic.Int32
			serve(mustNew(t, WithCrash(func() { crashed.Store(true) })), tt.h, &writes)
			if crashed.Load() != tt.wantCrash || writes.Load() != tt.wantWrites {
				t.Errorf("crashed %v after %d writes", crashed.Load(), writes.Load())
			}
		})
	}
}

func TestDefaultCrashAbortsHandler(t *testing.T) {
	t.Parallel()
	defer func() {
		if r := recover(); r != http.ErrAbortHandler {
			t.Errorf("recovered %v, want http.ErrAbortHandler", r)
		}
	}()
	var writes atomic.Int32
	serve(mustNew(t), http.Header{"Chaos-Crash": {"after-write"}}, &writes)
	t.Error("the default crash returned")
}

// TestDrop serves over a real connection: the handler's work is done, and the
// client sees the connection close instead of a response.
func TestDrop(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    []Option
		h       http.Header
		handler http.HandlerFunc
		dropped bool
	}{
		{"header, handler writes", nil, http.Header{"Chaos-Drop": {"after-record"}}, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "created")
		}, true},
		{"header, handler writes body only", nil, http.Header{"Chaos-Drop": {"after-record"}}, func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "created")
		}, true},
		{"header, handler writes nothing", nil, http.Header{"Chaos-Drop": {"after-record"}}, func(http.ResponseWriter, *http.Request) {}, true},
		{"random", []Option{WithDropRate(0.1), WithRand(fixedRand(0.05))}, nil, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusCreated)
		}, true},
		{"no drop", nil, nil, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var served atomic.Int32
			in := mustNew(t, tt.opts...)
			srv := httptest.NewServer(in.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				served.Add(1)
				tt.handler(w, r)
			})))
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
			req.Header = tt.h.Clone()
			if req.Header == nil {
				req.Header = http.Header{}
			}
			resp, err := srv.Client().Do(req)
			if resp != nil {
				resp.Body.Close()
			}
			if tt.dropped {
				if !errors.Is(err, io.EOF) {
					t.Errorf("err = %v, want EOF", err)
				}
			} else if err != nil || resp.StatusCode != http.StatusCreated {
				t.Errorf("resp %v, err %v", resp, err)
			}
			if served.Load() != 1 {
				t.Errorf("handler ran %d times", served.Load())
			}
		})
	}
}
