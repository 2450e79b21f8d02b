package redisstore

import "github.com/redis/go-redis/v9"

// Each script touches exactly one key (KEYS[1]), so every one of them runs on a
// single Redis Cluster slot. A claim's version byte and the owner's random
// token (bytes 3-18, 1-based as Lua counts) identify its owner; its kind byte
// (2) says whether the owner began its effect ('e', server.BeginEffect) or not
// ('l'): "the stored value is a claim whose version and token are mine" is the
// compare-and-set on (key, owner token) (ownsLua). The lease is inside the
// claim (deadline, suspect: 13-digit Unix milliseconds of Redis's TIME at
// bytes 19-31 and 32-44), and the key itself lives as long as a record would,
// so an outage of Redis cannot make a claim vanish by expiry: a takeover
// needs proof that the owner is gone (see claimScript). Lua strings are
// binary-safe.

// ownsLua defines owns(v): whether v is the caller's claim (ARGV[1]), marked
// or not.
const ownsLua = `
local function owns(v)
  local k = string.sub(v, 2, 2)
  return (k == 'l' or k == 'e') and string.sub(v, 1, 1) == string.sub(ARGV[1], 1, 1) and
    string.sub(v, 3, 18) == string.sub(ARGV[1], 3, 18)
end
`

// nowLua sets now to Redis's clock in milliseconds.
const nowLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// claimScript takes the key if it is free, or if its claim's owner has proven
// gone, else reports what holds it.
//
//	ARGV[1] the claim (deadline and suspect zero), ARGV[2] the lock TTL in ms,
//	ARGV[3] the key's TTL in ms, ARGV[4] the grace in ms.
//	Returns 1 when the claim is now the caller's, else {current value, ms}:
//	for a live claim the rest of its lease, for an expired one the rest of
//	its grace, for anything else the key's PTTL.
//
// A claim whose lease deadline has passed is not taken at once: its owner may
// be alive and only cut off from Redis (an outage, a restart), about to renew
// it or to record its response. The first claimant to see it expired marks it
// suspect (now); the key can be taken only once a whole grace period has passed
// since, with Redis up, without the owner renewing (which clears the mark) or
// finishing. The owner's scripts do not look at the mark.
//
// A claim whose owner began its effect (kind 'e', markScript) is never taken
// over: once its owner is proven gone the same way, it becomes an
// outcome-unknown value (kind 'u', the rest unchanged), which lives for the
// key's TTL and which every claimant is answered (OutcomeUnknown), the owner
// included should it come back: the effect may have happened, its answer is
// lost, and running the handler again could repeat it.
var claimScript = redis.NewScript(nowLua + ownsLua + `
local function claim(deadline)
  return string.sub(ARGV[1], 1, 18) .. string.format('%013d', deadline) ..
    string.rep('0', 13) .. string.sub(ARGV[1], 45)
end
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], claim(now + tonumber(ARGV[2])), 'PX', ARGV[3])
  return 1
end
local kind = string.sub(v, 2, 2)
if string.sub(v, 1, 1) ~= string.sub(ARGV[1], 1, 1) or (kind ~= 'l' and kind ~= 'e') then
  return {v, redis.call('PTTL', KEYS[1])}
end
if owns(v) then
  return 1
end
local deadline = tonumber(string.sub(v, 19, 31))
local suspect = tonumber(string.sub(v, 32, 44))
local grace = tonumber(ARGV[4])
if deadline > now then
  return {v, deadline - now}
end
if suspect == 0 then
  v = string.sub(v, 1, 31) .. string.format('%013d', now) .. string.sub(v, 45)
  redis.call('SET', KEYS[1], v, 'KEEPTTL')
  return {v, grace}
end
if now - suspect < grace then
  return {v, grace - (now - suspect)}
end
if kind == 'e' then
  v = string.sub(v, 1, 1) .. 'u' .. string.sub(v, 3)
  redis.call('SET', KEYS[1], v, 'PX', ARGV[3])
  return {v, tonumber(ARGV[3])}
end
redis.call('SET', KEYS[1], claim(now + tonumber(ARGV[2])), 'PX', ARGV[3])
return 1
`)

// finishScript replaces the caller's claim with the finished record.
//
//	ARGV[1] the claim, ARGV[2] the record, ARGV[3] the record TTL in ms.
//	Returns 1 when the record is stored, 0 when another value holds the key.
//	The record is also written when the key holds nothing: the caller's claim
//	was lost (a Redis restart without persistence, a failover) and nobody
//	claimed the key since, so the caller's run is the only one. A repeat of a
//	call that already succeeded (a client-side retry, or the background retry
//	after a failure) finds its own record and also returns 1.
var finishScript = redis.NewScript(ownsLua + `
local v = redis.call('GET', KEYS[1])
if not v or owns(v) then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
if v == ARGV[2] then
  return 1
end
return 0
`)

// renewScript extends the caller's claim: a new deadline, no suspect mark, and
// the key's TTL again (a handler may run longer than a record lives). The
// claim's kind (marked or not) is kept.
//
//	ARGV[1] the claim, ARGV[2] the lock TTL in milliseconds, ARGV[3] the key's
//	TTL in milliseconds.
//	Returns 1 when renewed, 0 when the claim is no longer the caller's.
var renewScript = redis.NewScript(nowLua + ownsLua + `
local v = redis.call('GET', KEYS[1])
if v and owns(v) then
  redis.call('SET', KEYS[1], string.sub(v, 1, 18) .. string.format('%013d', now + tonumber(ARGV[2])) ..
    string.rep('0', 13) .. string.sub(v, 45), 'PX', ARGV[3])
  return 1
end
return 0
`)

// releaseScript deletes the caller's claim, marked or not (a release after
// server.CancelEffect clears the mark with the claim).
//
//	ARGV[1] the claim.
//	Returns 1 (releaseDeleted) when it deleted the caller's claim, 2
//	(releaseGone) when the key holds nothing (a client-side retry of a release
//	that succeeded, or a claim that never landed), 0 (releaseOther) when
//	another value holds the key.
var releaseScript = redis.NewScript(ownsLua + `
local v = redis.call('GET', KEYS[1])
if v and owns(v) then
  redis.call('DEL', KEYS[1])
  return 1
end
if not v then
  return 2
end
return 0
`)

// markScript marks the caller's claim as one whose effect may have begun
// (server.BeginEffect): its kind byte becomes 'e', the rest (lease, suspect
// mark, fingerprint, the key's TTL) unchanged. Marking twice is harmless.
//
//	ARGV[1] the claim.
//	Returns 1 when the caller's claim is marked, 0 when it is no longer the
//	caller's (lost, taken, or never landed).
var markScript = redis.NewScript(ownsLua + `
local v = redis.call('GET', KEYS[1])
if v and owns(v) then
  if string.sub(v, 2, 2) == 'l' then
    redis.call('SET', KEYS[1], string.sub(v, 1, 1) .. 'e' .. string.sub(v, 3), 'KEEPTTL')
  end
  return 1
end
return 0
`)

// releaseScript's answers.
const (
	releaseOther   = 0
	releaseDeleted = 1
	releaseGone    = 2
)
