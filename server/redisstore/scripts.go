package redisstore

import "github.com/redis/go-redis/v9"

// Each script touches exactly one key (KEYS[1]), so every one of them runs on a
// single Redis Cluster slot. Values are compared whole: a claim's value holds
// the owner's random token, so "the stored value equals my claim" is the
// compare-and-set on (key, owner token). Lua strings are binary-safe.

// claimScript takes the key if it is free, else reports what holds it.
//
//	ARGV[1] the claim value, ARGV[2] the lock TTL in milliseconds.
//	Returns 1 when the claim was set, else {current value, its PTTL}.
var claimScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}
`)

// finishScript replaces the caller's claim with the finished record.
//
//	ARGV[1] the claim value, ARGV[2] the record, ARGV[3] the record TTL in ms.
//	Returns 1 when the record is stored, 0 when another value holds the key.
//	The record is also written when the key holds nothing: the caller's claim
//	expired (Redis was unreachable while the handler ran, or failed over) and
//	nobody took the key since, so the caller's run is the only one. A repeat
//	of a call that already succeeded (a client-side retry, or the background
//	retry after a failure) finds its own record and also returns 1.
var finishScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] or not v then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
if v == ARGV[2] then
  return 1
end
return 0
`)

// renewScript extends the caller's claim.
//
//	ARGV[1] the claim value, ARGV[2] the lock TTL in milliseconds.
//	Returns 1 when renewed, 0 when the claim is no longer the caller's.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// releaseScript deletes the caller's claim.
//
//	ARGV[1] the claim value.
//	Returns 1 when the key no longer holds the caller's claim and was not taken
//	by another owner (deleted now, or already gone: expired, or a client-side
//	retry of a release that succeeded), 0 when another value holds the key.
var releaseScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if not v then
  return 1
end
return 0
`)
