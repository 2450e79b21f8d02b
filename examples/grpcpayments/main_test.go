package main

import (
	"strings"
	"testing"
)

// The transcript tells what the package documentation says: two charges
// without idem, one with it, a replay, and a refusal of the reused key.
func TestTranscript(t *testing.T) {
	var b strings.Builder
	if err := run(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"attempt 2: OK           charged cus_a:20.00      payments of cus_a: 2",
		"attempt 1 failed (Unavailable), retrying with key",
		"replayed: true  payments of cus_b: 1",
		"answer: FailedPrecondition",
		"payments of cus_b: 1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the transcript lacks %q:\n%s", want, out)
		}
	}
}
