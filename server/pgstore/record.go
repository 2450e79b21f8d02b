package pgstore

import (
	"fmt"

	"github.com/idemkit/idem/server"
)

// record is a row as the claim's read returns it.
type record struct {
	fingerprint  string
	owner        string
	state        string
	status       *int32
	headerNames  [][]byte
	headerValues [][]byte
	body         []byte
}

// The states of a row: a record, and an effect mark (server.BeginEffect),
// which versions up to v0.1.0 also wrote at the claim.
const (
	stateDone   = "done"
	stateMarked = "claimed"
)

// marked reports whether r is an effect mark: its owner began an effect and
// has not recorded the answer.
func (r record) marked() bool { return r.state == stateMarked }

// gone is Do's answer for a live effect mark whose owner is gone: the effect
// may have happened and its answer is lost, so the key is outcome-unknown
// until the mark expires; a request of another fingerprint is a mismatch.
func (r record) gone(fingerprint string) server.Result {
	if r.fingerprint != fingerprint {
		return server.Result{Outcome: server.OutcomeMismatch}
	}
	return server.Result{Outcome: server.OutcomeUnknown}
}

// result turns a committed record that stopped a claim into Do's answer.
func (r record) result(fingerprint string) (server.Result, error) {
	if r.fingerprint != fingerprint {
		return server.Result{Outcome: server.OutcomeMismatch}, nil
	}
	if r.state != stateDone || r.status == nil {
		// Rows are only committed with their response ('done'); a row left
		// otherwise by hand is treated as held.
		return server.Result{Outcome: server.OutcomeInProgress, RetryAfter: InProgressRetryAfter}, nil
	}
	h, ok := decodeHeader(r.headerNames, r.headerValues, r.headerNames == nil && r.headerValues == nil)
	if !ok {
		return server.Result{}, fmt.Errorf("%w: %d header names, %d values", errBadRecord, len(r.headerNames), len(r.headerValues))
	}
	return server.Result{Outcome: server.OutcomeReplayed, Response: &server.Response{Status: int(*r.status), Header: h, Body: r.body}}, nil
}
