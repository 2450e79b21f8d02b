package idemgrpc

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem"
)

// Error is the error a call gets when the client interceptor ends it without
// an answer of the server's to return: the caller's context ended, the cap
// (idem.WithMaxElapsed) or the budget left no retry, or the key was invalid.
// When the call ends on an answer, a success or an error status (one that is
// not retried, or the last one when retries ran out), the caller gets that
// answer as grpc-go returned it, never an *Error.
//
// It is a gRPC status error: status.Code and status.FromError see the code
// of GRPCStatus. errors.Is matches its Cause (idem.ErrExhausted,
// idem.ErrBudgetExhausted, idem.ErrInvalidKey, the context's error) and its
// Last error.
type Error struct {
	// Attempts is the number of attempts made (0 when none was).
	Attempts int
	// Key is the call's idempotency key, "" when it had none.
	Key string
	// Cause is why the interceptor stopped.
	Cause error
	// Last is the latest attempt's error (a status error), nil when no
	// attempt was made.
	Last error

	detail   string
	deadline bool // the cap or the context's deadline ended the call
}

// GRPCStatus is the status the caller sees: Canceled or DeadlineExceeded
// when the context ended or time ran out, InvalidArgument for an invalid
// key, else the latest attempt's code (Unavailable when there was none); its
// message is Error's.
func (e *Error) GRPCStatus() *status.Status {
	code := codes.Unavailable
	switch {
	case errors.Is(e.Cause, idem.ErrInvalidKey):
		code = codes.InvalidArgument
	case errors.Is(e.Cause, context.Canceled):
		code = codes.Canceled
	case errors.Is(e.Cause, context.DeadlineExceeded), e.deadline:
		code = codes.DeadlineExceeded
	case e.Last != nil:
		code = status.Code(e.Last)
	}
	return status.New(code, e.Error())
}

// Error says how many attempts were made and why the interceptor stopped.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("idem: ")
	switch e.Attempts {
	case 0:
		b.WriteString("no attempt made")
	case 1:
		b.WriteString("stopped after 1 attempt")
	default:
		b.WriteString("stopped after " + strconv.Itoa(e.Attempts) + " attempts")
	}
	if e.Cause != nil {
		b.WriteString(": " + strings.TrimPrefix(e.Cause.Error(), "idem: "))
	}
	if e.detail != "" {
		b.WriteString(" (" + e.detail + ")")
	}
	if e.Last != nil && e.Last != e.Cause {
		b.WriteString("; last error: " + e.Last.Error())
	}
	return b.String()
}

// Unwrap returns Cause and Last, leaving out the nil ones.
func (e *Error) Unwrap() []error {
	var errs []error
	for _, err := range []error{e.Cause, e.Last} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
