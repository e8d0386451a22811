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

/// The part of the fair-lock scripts that finds the next in line: `now()` is the server's
/// clock in milliseconds; `next_in_line(now)` drops, from the head of the queue (KEYS[2], a
/// list of tokens), waiters whose place (score in KEYS[3], a sorted set of deadlines) has
/// lapsed, and returns the head's token or nil.
const FAIR_HEAD: &str = r"
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function next_in_line(now)
  local head = redis.call('LINDEX', KEYS[2], 0)
  while head do
    local deadline = redis.call('ZSCORE', KEYS[3], head)
    if deadline and tonumber(deadline) > now then return head end
    redis.call('LPOP', KEYS[2])
    if deadline then redis.call('ZREM', KEYS[3], head) end
    head = redis.call('LINDEX', KEYS[2], 0)
  end
  return nil
end
";

/// Fair acquire (KEYS: lock, queue, deadlines, fencing counter; ARGV: token, lease ms, place
/// ms, fencing `1`/`0`). The lock goes to ARGV[1] only if it is free and nobody is ahead in
/// line → {1, fencing token or 0}; a lock already holding ARGV[1] (a retry whose first reply
/// was lost) → the same. Otherwise the token joins the end of the line, or keeps its place
/// for ARGV[3] ms more → {0, ms to wait: the holder's PTTL, or until the head's place lapses}.
/// A busy lock costs no look at the queue beyond joining it.
pub(super) fn acquire_fair() -> String {
    format!(
        "{FAIR_HEAD}{}",
        r"
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  if ARGV[4] == '1' then return {1, tonumber(redis.call('GET', KEYS[4]) or '0')} end
  return {1, 0}
end
local t = now()
local head = nil
if not v then
  head = next_in_line(t)
  if not head or head == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    if head then
      redis.call('LPOP', KEYS[2])
      redis.call('ZREM', KEYS[3], head)
    end
    if ARGV[4] == '1' then return {1, redis.call('INCR', KEYS[4])} end
    return {1, 0}
  end
end
if redis.call('ZADD', KEYS[3], t + tonumber(ARGV[3]), ARGV[1]) == 1 then
  redis.call('RPUSH', KEYS[2], ARGV[1])
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
if v then return {0, redis.call('PTTL', KEYS[1])} end
return {0, tonumber(redis.call('ZSCORE', KEYS[3], head)) - t}"
    )
}

/// Fair release (KEYS: lock, queue, deadlines; ARGV: token). The holder's token: delete the
/// lock and wake the next in line (the message names it) → 1. A waiting token: give up its
/// place, and wake the next if it was first in line of a free lock → 0.
pub(super) fn release_fair() -> String {
    format!(
        "{FAIR_HEAD}{}",
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  local head = next_in_line(now())
  if head then redis.call('PUBLISH', KEYS[1], head) end
  return 1
end
local first = redis.call('LINDEX', KEYS[2], 0) == ARGV[1]
if redis.call('LREM', KEYS[2], 1, ARGV[1]) == 1 then
  redis.call('ZREM', KEYS[3], ARGV[1])
  if first and redis.call('EXISTS', KEYS[1]) == 0 then
    local head = next_in_line(now())
    if head then redis.call('PUBLISH', KEYS[1], head) end
  end
end
return 0"
    )
}

/// Reads one lock for the admin API into `found` — {value, pttl, fence or nil, queue length};
/// KEYS = the lock, its fencing counter, its fair queue. Returns nil unless the lock is a
/// string: foreign keys of other types are skipped, not failed on.
macro_rules! read_lock {
    () => {
        r"
if redis.call('TYPE', KEYS[1]).ok ~= 'string' then return false end
local fence = false
if redis.call('TYPE', KEYS[2]).ok == 'string' then fence = redis.call('GET', KEYS[2]) end
local waiting = 0
if redis.call('TYPE', KEYS[3]).ok == 'list' then waiting = redis.call('LLEN', KEYS[3]) end
local found = {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), fence, waiting}
"
    };
}

/// The admin API's look at one lock (read-only): see `read_lock!`.
pub(super) const INSPECT: &str = concat!(read_lock!(), "return found");

/// A forced release: the lock as `INSPECT` reads it, then deleted whoever holds it, and every
/// waiter woken (`released`: a fair lock's next in line asks again and finds it free).
pub(super) const FORCE_RELEASE: &str = concat!(
    read_lock!(),
    "redis.call('DEL', KEYS[1])\nredis.call('PUBLISH', KEYS[1], 'released')\nreturn found"
);
