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

	// ErrNotReplicated is wrapped by Do's error when WithMinReplicas is set and
	// fewer replicas than asked acknowledged the claim in time. The claim was
	// released and the handler did not run.
	ErrNotReplicated = errors.New("redisstore: not acknowledged by enough replicas")

	// ErrEvictionPolicy is wrapped by the error of Check and Do when a Redis
	// node's maxmemory-policy can evict the store's records and
	// WithEvictionAllowed was not given. The handler does not run.
	ErrEvictionPolicy = errors.New("redisstore: the Redis maxmemory-policy can evict idempotency records")
)
