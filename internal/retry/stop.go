package retry

import "errors"

// Why an operation ended: the values of idem.Report.Stop.
const (
	StopSuccess      = "success"
	StopFinalStatus  = "final-status"
	StopNotRetryable = "not-retryable"
	StopExhausted    = "exhausted"
	StopDeadline     = "deadline"
	StopCanceled     = "canceled"
	StopBudget       = "budget"
	StopHostHold     = "host-hold"
	StopInvalidKey   = "invalid-key"
)

// The causes of an operation's end; package idem exports them under the
// same names, for errors.Is.
var (
	ErrExhausted         = errors.New("idem: retries exhausted")
	ErrBudgetExhausted   = errors.New("idem: retry budget exhausted")
	ErrBodyNotReplayable = errors.New("idem: request body cannot be replayed")
)

// WrapError is a sentinel cause with the error that led to it.
type WrapError struct {
	Sentinel error
	Err      error
}

func (e *WrapError) Error() string {
	return e.Sentinel.Error() + ": " + e.Err.Error()
}

func (e *WrapError) Unwrap() []error { return []error{e.Sentinel, e.Err} }
