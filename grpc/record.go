package idemgrpc

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idem/server"
)

// recordType is the Content-Type of a recorded gRPC answer, in the stored
// server.Response's header: a store holds HTTP and gRPC answers alike, and
// the fingerprints keep one from being replayed as the other.
const recordType = "application/grpc+idem-record"

// answer is one call's answer as it is recorded and replayed: its status
// (code, message, details), the response message's bytes (OK only), and the
// header and trailer metadata the handler set.
type answer struct {
	status  *spb.Status
	message []byte
	header  metadata.MD
	trailer metadata.MD
}

// The fields of a record's body, in protobuf's wire format: a status, the
// message's bytes, and one (key, value) pair per metadata value.
const (
	fieldStatus  = 1
	fieldMessage = 2
	fieldHeader  = 3
	fieldTrailer = 4
	fieldMDKey   = 1
	fieldMDValue = 2
)

// response returns a as the server.Response a store records: the status its
// code is over HTTP (for an operator reading the store), the record type,
// and the body.
func (a *answer) response() (*server.Response, error) {
	st, err := proto.MarshalOptions{Deterministic: true}.Marshal(a.status)
	if err != nil {
		return nil, err
	}
	b := protowire.AppendTag(nil, fieldStatus, protowire.BytesType)
	b = protowire.AppendBytes(b, st)
	if a.message != nil {
		b = protowire.AppendTag(b, fieldMessage, protowire.BytesType)
		b = protowire.AppendBytes(b, a.message)
	}
	b = appendMD(b, fieldHeader, a.header)
	b = appendMD(b, fieldTrailer, a.trailer)
	return &server.Response{Status: httpStatus(codes.Code(a.status.GetCode())),
		Header: http.Header{"Content-Type": {recordType}}, Body: b}, nil
}

// appendMD appends md's values as fields of number field, keys sorted, each
// key's values in order.
func appendMD(b []byte, field protowire.Number, md metadata.MD) []byte {
	for _, k := range sortedKeys(md) {
		for _, v := range md[k] {
			var e []byte
			e = protowire.AppendTag(e, fieldMDKey, protowire.BytesType)
			e = protowire.AppendString(e, k)
			e = protowire.AppendTag(e, fieldMDValue, protowire.BytesType)
			e = protowire.AppendString(e, v)
			b = protowire.AppendTag(b, field, protowire.BytesType)
			b = protowire.AppendBytes(b, e)
		}
	}
	return b
}

// errNotGRPCRecord is a stored answer that is not a gRPC record: a store
// that returned another key's record, or bytes changed in the store.
var errNotGRPCRecord = errors.New("idem: the stored answer is not a gRPC record")

// decodeAnswer reads a recorded answer back.
func decodeAnswer(r *server.Response) (*answer, error) {
	if r == nil || r.Header.Get("Content-Type") != recordType {
		return nil, errNotGRPCRecord
	}
	a := &answer{header: metadata.MD{}, trailer: metadata.MD{}}
	b := r.Body
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return nil, fmt.Errorf("%w: malformed field", errNotGRPCRecord)
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, fmt.Errorf("%w: truncated field %d", errNotGRPCRecord, num)
		}
		b = b[n:]
		var err error
		switch num {
		case fieldStatus:
			a.status = new(spb.Status)
			err = proto.Unmarshal(v, a.status)
		case fieldMessage:
			a.message = append([]byte{}, v...)
		case fieldHeader:
			err = consumeMD(v, a.header)
		case fieldTrailer:
			err = consumeMD(v, a.trailer)
		default:
			err = fmt.Errorf("unknown field %d", num)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errNotGRPCRecord, err)
		}
	}
	if a.status == nil {
		return nil, fmt.Errorf("%w: no status", errNotGRPCRecord)
	}
	return a, nil
}

// consumeMD reads one (key, value) pair into md.
func consumeMD(b []byte, md metadata.MD) error {
	var k, v string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return errors.New("malformed metadata")
		}
		b = b[n:]
		s, n := protowire.ConsumeString(b)
		if n < 0 {
			return errors.New("truncated metadata")
		}
		b = b[n:]
		switch num {
		case fieldMDKey:
			k = s
		case fieldMDValue:
			v = s
		}
	}
	if k == "" {
		return errors.New("metadata without a key")
	}
	md[k] = append(md[k], v)
	return nil
}

// err returns the answer's status as the handler's error, nil for OK.
func (a *answer) err() error {
	if codes.Code(a.status.GetCode()) == codes.OK {
		return nil
	}
	return status.ErrorProto(a.status)
}

// httpStatus is the HTTP status a code stands for (google.rpc.Code's
// mapping): what the store records as the answer's status, and what decides
// whether it is recorded at all, as over HTTP.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.Canceled:
		return 499 // client closed request
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError // Unknown, Internal, DataLoss, a code gRPC does not define
}

// sortedKeys returns md's keys in order.
func sortedKeys(md metadata.MD) []string { return slices.Sorted(maps.Keys(md)) }
