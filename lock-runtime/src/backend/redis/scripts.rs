//! The Lua scripts the Redis backend runs: each makes one operation atomic on the server.

/// Compare-token delete, then wake the waiters (unless ARGV[2] is `quiet`: Redlock undoing a
/// failed attempt must not wake anyone). Returns 1 if the lock was ours.
pub(super) const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= 'quiet' then
    redis.call('PUBLISH', KEYS[1], 'released')
  end
  return 1
end
return 0";

/// Compare-token extend. Returns 1 if the lock was ours and is extended.
pub(super) const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0";

/// Compare-token extend of many locks at once: KEYS are the locks, ARGV holds a (token, lease)
/// pair per key. Returns 1/0 per key.
pub(super) const RENEW_MANY: &str = r"
local out = {}
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[2 * i - 1] then
    out[i] = redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
  else
    out[i] = 0
  end
end
return out";

/// Acquire with a fencing token: {1, token} when taken (or already ours: a retried attempt),
/// {0, pttl} when busy.
pub(super) const ACQUIRE_FENCED: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('INCR', KEYS[2])}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
return {0, redis.call('PTTL', KEYS[1])}";

/// A retried acquisition (the first try's reply was lost on a dropped connection): take the
/// lock if free, or report it ours if the first try took it → {1, -3}; else {0, pttl} (pttl is
/// -2 when the key is gone, -1 without TTL).
pub(super) const ACQUIRE: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {1, -3} end
if redis.call('GET', KEYS[1]) == ARGV[1] then return {1, -3} end
return {0, redis.call('PTTL', KEYS[1])}";

/// Hand-over between two tasks of one client: if the lock holds ARGV[1], it now holds ARGV[2]
/// with a lease of ARGV[3] ms (and a new fencing token from KEYS[2] if ARGV[4] is 1) → the
/// fencing token, or 0. If ARGV[5] is 1 (a retry whose first reply was lost) a lock already
/// holding ARGV[2] counts as handed. Otherwise → -1: it was not ours, nothing changed.
pub(super) const HAND_OVER: &str = r"
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  if ARGV[4] == '1' then return redis.call('INCR', KEYS[2]) end
  return 0
end
if ARGV[5] == '1' and v == ARGV[2] then
  if ARGV[4] == '1' then return tonumber(redis.call('GET', KEYS[2]) or '0') end
  return 0
end
return -1";

/// One Redlock vote: take the lock if free (or refresh it if it is already ours: a retried
/// attempt) → {1}; else {0, pttl, holder's token}.
pub(super) const VOTE: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1}
end
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1}
end
if not v then return {0, -2, ''} end
return {0, redis.call('PTTL', KEYS[1]), v}";
