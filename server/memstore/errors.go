package memstore

import "errors"

// ErrFull is wrapped by Do's error when the Store holds WithMaxEntries live
// records and claims, or WithMaxBytes bytes of them, and none has expired.
// run was not called.
var ErrFull = errors.New("memstore: store is full")

// ErrScopeFull is wrapped by Do's error when the request's scope holds its
// quota (WithScopeShare) of live records and claims and none has expired:
// one scope cannot take what the others need. run was not called.
var ErrScopeFull = errors.New("memstore: scope quota is full")

// ErrInvalidRequest is wrapped by Do's error when the request cannot be stored
// (a non-positive TTL, a nil run). run was not called.
var ErrInvalidRequest = errors.New("memstore: invalid request")
