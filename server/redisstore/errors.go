package redisstore

import "errors"

var (
	// ErrLeaseLost is wrapped (together with server.ErrNotRecorded) by Do's error
	// when the claim was lost while the handler ran: it expired, another owner
	// took the key, or Redis could not be reached to renew it before it would
	// have expired. The handler's context is cancelled with this cause.
	ErrLeaseLost = errors.New("redisstore: lease lost")

	// ErrCorruptRecord is wrapped by Do's error when the value stored under a
	// key cannot be decoded. Such a value is never replayed and never
	// overwritten by Do; an operator must delete it.
	ErrCorruptRecord = errors.New("redisstore: corrupt record")

	// ErrUnknownVersion is wrapped by Do's error when the stored value was
	// written in an encoding this build does not read (for example by a newer
	// version of the package during a rolling upgrade).
	ErrUnknownVersion = errors.New("redisstore: unknown record encoding version")
)
