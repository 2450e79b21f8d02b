package bench

import (
	"testing"
	"time"
)

func smallContention() ContentionConfig {
	cfg := DefaultContention()
	cfg.Clients = []int{1, 10, 50}
	cfg.Runs = 10
	return cfg
}

func TestContentionDeterministic(t *testing.T) {
	t.Parallel()
	cfg := smallContention()
	a := RunContention(cfg, ContentionStrategies())
	b := RunContention(cfg, ContentionStrategies())
	if len(a) != len(b) || len(a) != len(cfg.Clients)*len(ContentionStrategies()) {
		t.Fatalf("got %d and %d points", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("point %d differs between runs with one seed: %+v vs %+v", i, a[i], b[i])
		}
	}
	cfg.Seed++
	c := RunContention(cfg, ContentionStrategies())
	same := true
	for i := range a {
		same = same && a[i] == c[i]
	}
	if same {
		t.Fatal("another seed gave identical results")
	}
}

func TestContentionShape(t *testing.T) {
	t.Parallel()
	pts := RunContention(smallContention(), ContentionStrategies())
	at := func(strategy string, clients int) ContentionPoint {
		for _, p := range pts {
			if p.Strategy == strategy && p.Clients == clients {
				return p
			}
		}
		t.Fatalf("no point for %s with %d clients", strategy, clients)
		return ContentionPoint{}
	}
	for _, s := range ContentionStrategies() {
		t.Run(s.Name, func(t *testing.T) {
			one := at(s.Name, 1)
			if one.Calls != 1 {
				t.Errorf("one client made %v calls, want exactly 1", one.Calls)
			}
			if one.Time <= 0 || one.Time > 100*time.Millisecond {
				t.Errorf("one client took %v, want four network hops (~40ms)", one.Time)
			}
			if many := at(s.Name, 50); many.Calls < 50 {
				t.Errorf("50 clients made %v calls, want at least 50", many.Calls)
			}
		})
	}
	// The blog's findings: jitter cuts both the work and the completion time of
	// plain exponential backoff, which is slower than not backing off at all.
	expo := at("exponential, no jitter", 50)
	for _, name := range []string{"equal jitter", "full jitter", "decorrelated jitter"} {
		j := at(name, 50)
		if !(j.Calls < 0.75*expo.Calls) {
			t.Errorf("%s made %v calls, exponential without jitter %v: want under 3/4", name, j.Calls, expo.Calls)
		}
		if !(j.Time < expo.Time/4) {
			t.Errorf("%s took %v, exponential without jitter %v: want under 1/4", name, j.Time, expo.Time)
		}
	}
	if none := at("no backoff", 50); !(none.Time < expo.Time) {
		t.Errorf("no backoff took %v, exponential without jitter %v: want shorter", none.Time, expo.Time)
	}
}
