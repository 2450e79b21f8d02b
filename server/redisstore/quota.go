package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/scopecache"
)

// Defaults of WithScopeLimits: what one scope's records may take in Redis.
const (
	DefaultScopeMaxEntries = 100_000
	DefaultScopeMaxBytes   = 64 << 20
)

// ErrScopeFull is wrapped by Do's error, before the handler runs, when a
// request with a new key comes from a scope that holds its share of the store
// (WithScopeLimits): the claim is released and the middleware answers 503 with
// Retry-After. The scope's new keys are refused until some of its records
// expire; its replays, and its duplicates of keys in progress, are served.
var ErrScopeFull = errors.New("redisstore: the scope holds its share of the store")

// recordOverhead is what Redis takes for one record beyond its key and value,
// in bytes, as measured on Redis 7.0 (a key of about 100 bytes with a TTL: the
// main and expires dictionaries' entries, the strings' headers, the
// allocator's rounding); each record is charged len(key) + len(value) +
// recordOverhead.
const recordOverhead = 160

// Usage of a scope is counted in Redis, in one hash per scope (usageKey),
// so that every process that shares the store sees the same numbers: each
// record is charged, when it is written, to the bucket of the time it expires
// (fields "e<end>" for entries and "b<end>" for bytes, end being the bucket's
// end in Redis's Unix milliseconds), and a bucket whose end has passed is
// deleted the next time the hash is read. A scope's usage is the sum of its
// live buckets: its records still live, plus those that expired less than one
// bucket ago (at most a sixteenth of their TTL, at least a second), so the
// count errs on the side of the bound. The hash expires with its last bucket.
//
// chargeScript adds one record and returns the scope's usage.
//
//	KEYS[1] the usage hash; ARGV[1] the record's bytes, ARGV[2] its TTL in ms,
//	ARGV[3] the bucket width in ms. Returns {entries, bytes}.
var chargeScript = redis.NewScript(nowLua + usageLua + `
local w = tonumber(ARGV[3])
local e = string.format('%d', math.ceil((now + tonumber(ARGV[2])) / w) * w)
redis.call('HINCRBY', KEYS[1], 'e' .. e, 1)
redis.call('HINCRBY', KEYS[1], 'b' .. e, ARGV[1])
return usage()
`)

// usageScript returns the scope's usage, {entries, bytes}, dropping the
// buckets that have ended. KEYS[1] the usage hash.
var usageScript = redis.NewScript(nowLua + usageLua + `
return usage()
`)

// usageLua defines usage(): the sum of the live buckets of KEYS[1], whose
// ended buckets it deletes and whose expiry it sets to its last bucket's end.
const usageLua = `
local function usage()
  local all = redis.call('HGETALL', KEYS[1])
  local entries, bytes, last = 0, 0, 0
  for i = 1, #all, 2 do
    local f = all[i]
    local e = tonumber(string.sub(f, 2))
    if e <= now then
      redis.call('HDEL', KEYS[1], f)
    else
      if string.sub(f, 1, 1) == 'e' then
        entries = entries + tonumber(all[i + 1])
      else
        bytes = bytes + tonumber(all[i + 1])
      end
      if e > last then last = e end
    end
  end
  if last > 0 then
    redis.call('PEXPIREAT', KEYS[1], string.format('%d', last))
  end
  return {entries, bytes}
end
`

// scopeUsage is a scope's usage as Redis last reported it, and when.
type scopeUsage struct {
	entries, bytes int64
	at             time.Time
}

// usageCache holds the last usage Redis reported for the scopes this process
// served, so that a claim of a scope known to be within its share costs no
// call: each record's charge returns the scope's usage, and only a scope
// known to be over it is asked again (once per usageRefresh at most) before
// it is refused. A scope not in the cache (never seen, or dropped to make
// room: scopecache.MaxScopes) is taken as within its share until its next
// record.
type usageCache = scopecache.Cache[scopeUsage]

// usageRefresh is how long a scope refused for being over its share is
// refused before Redis is asked whether some of its records expired.
const usageRefresh = time.Second

// usageKey is the Redis key of scope's usage hash: the prefix, "u:" and the
// hex SHA-256 of the scope; no record key has a 'u' where its scope hash
// starts.
func (s *Store) usageKey(scope string) string {
	sum := sha256.Sum256([]byte(scope))
	return s.cfg.prefix + "u:" + hex.EncodeToString(sum[:])
}

// bounded reports whether scope's records are bounded: every non-empty scope
// is (the empty scope, one for everyone, has no share to keep).
func (s *Store) bounded(scope string) bool { return scope != "" }

// over reports whether u is at or past the scope's share.
func (s *Store) over(u scopeUsage) bool {
	return u.entries >= s.cfg.scopeMaxEntries || u.bytes >= s.cfg.scopeMaxBytes
}

// admit returns an error wrapping ErrScopeFull when scope holds its share:
// as the cache says, or, when that is older than usageRefresh, as Redis says
// now. A failed read is not a refusal: the claim that follows meets the
// same Redis.
func (s *Store) admit(ctx context.Context, scope string) error {
	if !s.bounded(scope) {
		return nil
	}
	u, ok := s.usage.Get(scope)
	if !ok || !s.over(u) {
		return nil
	}
	if time.Since(u.at) >= usageRefresh {
		fresh, err := s.readUsage(ctx, scope)
		if err != nil {
			return nil
		}
		if u = fresh; !s.over(u) {
			return nil
		}
	}
	return fmt.Errorf("%w (%d records, %d bytes; at most %d and %d)", ErrScopeFull, u.entries, u.bytes,
		s.cfg.scopeMaxEntries, s.cfg.scopeMaxBytes)
}

// readUsage asks Redis for scope's usage and caches it.
func (s *Store) readUsage(ctx context.Context, scope string) (scopeUsage, error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.opTimeout)
	defer cancel()
	res, err := call(cctx, s.direct, func(ctx context.Context) (any, error) {
		return usageScript.Run(ctx, s.client, []string{s.usageKey(scope)}).Result()
	})
	if err != nil {
		return scopeUsage{}, err
	}
	return s.noteUsage(scope, res)
}

// charge is one record's charge to its scope (see chargeScript).
type charge struct {
	scope string
	bytes int64
	ttl   time.Duration
}

// chargeFor returns the charge of a record of value under key, or nil when
// the scope is not bounded.
func (s *Store) chargeFor(scope, key string, value []byte, ttl time.Duration) *charge {
	if !s.bounded(scope) {
		return nil
	}
	return &charge{scope: scope, bytes: int64(len(key)+len(value)) + recordOverhead, ttl: ttl}
}

// queue adds c's chargeScript to p.
func (s *Store) queue(ctx context.Context, p redis.Scripter, c *charge) *redis.Cmd {
	return chargeScript.EvalSha(ctx, p, []string{s.usageKey(c.scope)}, c.bytes, millis(c.ttl), millis(bucketWidth(c.ttl)))
}

// bucketWidth is the width of a usage bucket for records of ttl: a sixteenth
// of it, at least a second.
func bucketWidth(ttl time.Duration) time.Duration { return max(ttl/16, time.Second) }

// noteUsage caches the {entries, bytes} reply of chargeScript or usageScript.
func (s *Store) noteUsage(scope string, reply any) (scopeUsage, error) {
	r, ok := reply.([]any)
	if !ok || len(r) != 2 {
		return scopeUsage{}, fmt.Errorf("redisstore: usage: unexpected reply %T %v", reply, reply)
	}
	e, okE := r[0].(int64)
	b, okB := r[1].(int64)
	if !okE || !okB {
		return scopeUsage{}, fmt.Errorf("redisstore: usage: unexpected reply %v", r)
	}
	u := scopeUsage{entries: e, bytes: b, at: time.Now()}
	s.usage.Set(scope, u)
	return u, nil
}
