package idemgrpc

import (
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The metadata both sides read and write.
const (
	// MetadataKey carries a call's idempotency key, as the Idempotency-Key
	// header does over HTTP: the key itself, 1 to 255 visible ASCII
	// characters, one value.
	MetadataKey = "idempotency-key"
	// MetadataReplayed is the trailer with which the server marks a
	// replayed answer ("true"), as Idempotent-Replayed does over HTTP.
	MetadataReplayed = "idempotent-replayed"
	// metadataPushback is gRFC A6's server pushback: the milliseconds a
	// client waits before its retry; a negative or malformed value means
	// do not retry.
	metadataPushback = "grpc-retry-pushback-ms"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo the server
// interceptor puts in the statuses it answers itself; their Reason is one of
// the Reason constants.
const ErrorDomain = "idem.idemkit.dev"

// The reasons of the ErrorInfo the server interceptor answers with: what the
// HTTP contract's problem types say (docs/CONTRACT.md §3).
const (
	ReasonMissingKey       = "IDEMPOTENCY_KEY_MISSING"     // InvalidArgument (HTTP 400)
	ReasonInvalidKey       = "IDEMPOTENCY_KEY_INVALID"     // InvalidArgument (HTTP 400)
	ReasonKeyReused        = "IDEMPOTENCY_KEY_REUSED"      // FailedPrecondition (HTTP 422)
	ReasonInProgress       = "IDEMPOTENCY_KEY_IN_PROGRESS" // Aborted, with pushback (HTTP 409)
	ReasonOutcomeUnknown   = "IDEMPOTENCY_OUTCOME_UNKNOWN" // Unknown (HTTP 500, never retried)
	ReasonStoreUnavailable = "IDEMPOTENCY_STORE_UNAVAILABLE"
	ReasonBusy             = "IDEMPOTENCY_BUSY"
	ReasonRequestTooLarge  = "IDEMPOTENCY_REQUEST_TOO_LARGE"
	ReasonUnprotectable    = "IDEMPOTENCY_UNPROTECTABLE"
	ReasonUnauthenticated  = "IDEMPOTENCY_NO_CREDENTIALS"
)

// Replayed reports whether trailer, the trailer metadata of a call
// (grpc.Trailer), marks the answer as a replay of the first execution's.
func Replayed(trailer metadata.MD) bool {
	vs := trailer.Get(MetadataReplayed)
	return len(vs) == 1 && strings.EqualFold(strings.TrimSpace(vs[0]), "true")
}

// reason returns the ErrorInfo reason of st in idem's domain, "" for none.
func reason(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return info.GetReason()
		}
	}
	return ""
}

// maxPushback bounds the pushback read: a larger value is read as this, and
// then exceeds any WithMaxRetryAfter (which stops the operation).
const maxPushback = 24 * time.Hour

// pushback reads the wait a failed call's answer asks for: gRFC A6's
// grpc-retry-pushback-ms trailer, else a google.rpc.RetryInfo detail. ok
// says there was one; never says the server asked for no retry at all (a
// negative or malformed pushback, gRFC A6), which wins over RetryInfo.
func pushback(st *status.Status, trailer metadata.MD) (wait time.Duration, ok, never bool) {
	switch vs := trailer.Get(metadataPushback); {
	case len(vs) > 1:
		return 0, false, true
	case len(vs) == 1:
		ms, err := strconv.ParseInt(strings.TrimSpace(vs[0]), 10, 64)
		if err != nil || ms < 0 {
			return 0, false, true
		}
		return min(time.Duration(ms)*time.Millisecond, maxPushback), true, false
	}
	if st == nil {
		return 0, false, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			delay := ri.GetRetryDelay()
			if delay.CheckValid() != nil || delay.AsDuration() < 0 {
				return 0, false, false // an invalid RetryInfo is no pushback, and no refusal
			}
			return min(delay.AsDuration(), maxPushback), true, false
		}
	}
	return 0, false, false
}

// withDetails returns a status of code and msg with an ErrorInfo of reason
// why in idem's domain and, when after > 0, a RetryInfo of after.
func withDetails(code codes.Code, msg, why string, after time.Duration) *status.Status {
	p := status.New(code, msg).Proto()
	info, err := anypb.New(&errdetails.ErrorInfo{Reason: why, Domain: ErrorDomain})
	if err == nil {
		p.Details = append(p.Details, info)
	}
	if after > 0 {
		if ri, err := anypb.New(&errdetails.RetryInfo{RetryDelay: durationpb.New(after)}); err == nil {
			p.Details = append(p.Details, ri)
		}
	}
	return status.FromProto(p)
}
