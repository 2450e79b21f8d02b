package cause

import (
	"context"
	"errors"
	"testing"
)

func TestReport(t *testing.T) {
	Report(context.Background(), errors.New("nobody listens")) // no reporter: nothing happens
	var got []error
	ctx := With(context.Background(), func(err error) { got = append(got, err) })
	want := errors.New("ledger down")
	Report(ctx, want)
	Report(ctx, nil)
	if len(got) != 1 || got[0] != want {
		t.Errorf("reported %v, want [%v]", got, want)
	}
}
