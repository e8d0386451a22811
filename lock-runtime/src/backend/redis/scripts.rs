//! The Lua scripts the Redis backend runs: each makes one operation atomic on the server.
//!
//! A plain lock (the write side of a read/write lock) is the string `lock:K` holding its
//! owner's token, with the lease as its TTL — redis-py's layout. The readers of a key hold the
//! same key as a sorted set instead: one member per reader, its token, scored by the end of
//! that reader's own lease in server milliseconds; the key's TTL is the end of the longest
//! live share, so the key exists exactly while some reader holds it. A plain `SET NX` finds the
//! key taken either way, which is what makes readers and writers exclude each other. A writer
//! waiting for readers to leave marks the key in `lock-writers:<name>` (a sorted set of tokens
//! scored by when the mark lapses): while a mark is live, no new reader joins.
//!
//! A semaphore is a sorted set too: one member per permit (its token, scored by the end of its
//! own lease, like a reader's share), plus the member `#permits` scored by minus the limit its
//! holders took their permits under — below every share, so dropping lapsed shares
//! (`ZREMRANGEBYSCORE key 0 now`) keeps it, and its presence is what tells a semaphore from a
//! read lock. No counter: the count is the set of live permits.
//!
//! Acquisition scripts answer `{1, fencing token}` (taken), `{0, ms}` (busy for that long at
//! most), or `{2, limit}`: refused, the name being held as another kind — a semaphore of
//! `limit` permits, or (`0`) a lock — or, for a semaphore's request, under another limit.

/// Lua helpers: `now()` is the server's clock in milliseconds; `holder(key)` is the token of a
/// plain lock, `''` for a key of another type (readers' shares: held, by nobody's token), or
/// `false` for no key.
const HELPERS: &str = r"
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function holder(key)
  local t = redis.call('TYPE', key).ok
  if t == 'string' then return redis.call('GET', key) end
  if t == 'none' then return false end
  return ''
end
";

/// `{2, limit}` if KEYS[1] (of type `t`) is a semaphore: its limit (see the module docs).
const REFUSE_SEMAPHORE: &str = r"
if t == 'zset' then
  local limit = redis.call('ZSCORE', KEYS[1], '#permits')
  if limit then return {2, -tonumber(limit)} end
end
";

/// Release (KEYS: lock, writers' marks; ARGV: token, `quiet`?): compare-token delete, then
/// wake the waiters (unless ARGV[2] is `quiet`: Redlock undoing a failed attempt must not wake
/// anyone) → 1. A token that only waited gives its writer's mark up (waking the readers it
/// held back, if it was the last) → 0.
///
/// The hot path of every plain lock, so it asks for the token with one `GET` and no helpers:
/// a key of another type (readers' shares) answers it with an error, which `pcall` turns into
/// a value that equals no token.
pub(super) fn release() -> String {
    r"
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= 'quiet' then
    redis.call('PUBLISH', KEYS[1], 'released')
  end
  return 1
end
if KEYS[2] and redis.call('ZREM', KEYS[2], ARGV[1]) == 1
    and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('PUBLISH', KEYS[1], 'released')
end
return 0"
        .to_owned()
}

/// The renewal of one hold, as a Lua function: a plain lock still holding `token` gets its
/// TTL set to `lease` ms; a reader's live share (`shared` = `1`) ends `lease` ms from now, and
/// the key lives at least as long — or, an upgradable share (token `^…`) that was upgraded
/// since the renewal was sent, the plain lock it became. 1 if renewed, 0 if the hold is gone.
const RENEW_HOLD: &str = r"
local function renew(key, token, lease, shared)
  if shared == '1' then
    local t = redis.call('TYPE', key).ok
    if t == 'string' and string.sub(token, 1, 1) == '^' and redis.call('GET', key) == token then
      return redis.call('PEXPIRE', key, lease)
    end
    if t ~= 'zset' then return 0 end
    local t = now()
    local ends = redis.call('ZSCORE', key, token)
    if not ends or tonumber(ends) <= t then return 0 end
    redis.call('ZADD', key, t + tonumber(lease), token)
    if redis.call('PTTL', key) < tonumber(lease) then redis.call('PEXPIRE', key, lease) end
    return 1
  end
  if holder(key) == token then return redis.call('PEXPIRE', key, lease) end
  return 0
end
";

/// Renew one hold (KEYS: lock; ARGV: token, lease ms, shared `1`/`0`) → 1/0.
pub(super) fn renew() -> String {
    format!(
        "{HELPERS}{RENEW_HOLD}{}",
        "return renew(KEYS[1], ARGV[1], ARGV[2], ARGV[3])"
    )
}

/// Renew many holds at once: KEYS are the locks, ARGV holds a (token, lease, shared) triple
/// per key → one string, `1`/`0` per key (one bulk reply to read, not an array of integers).
pub(super) fn renew_many() -> String {
    format!(
        "{HELPERS}{RENEW_HOLD}{}",
        r"
local out = {}
for i = 1, #KEYS do
  out[i] = renew(KEYS[i], ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]) == 1 and '1' or '0'
end
return table.concat(out)"
    )
}

/// A plain lock's attempt by script — a waiter's, a fenced one, or a retry whose first try's
/// reply was lost (KEYS: lock, fencing counter, writers' marks; ARGV: token, lease ms, fencing
/// `1`/`0`, mark ms — `0`: do not mark —, retry `1`/`0`, marked `1`/`0`). Taken if free, or (a
/// retry) already ours → {1, fencing token or 0}, taking the token's mark back if it made one
/// (ARGV[6]: the client remembers); only a retry asks whose the lock is, so a waiter's attempt
/// on a lock held by another costs `TYPE` and `PTTL`, and a plain lock's grant `SET` alone. Held by readers → {0, ms until their last share ends}, after marking the key against
/// new readers for ARGV[4] ms (then at most a third of that: the waiter asks again in time to
/// keep its mark). Held by another writer → {0, pttl}. A key of another type fails.
pub(super) fn write() -> String {
    format!(
        "{HELPERS}{}{REFUSE_SEMAPHORE}{}",
        r"
local t = redis.call('TYPE', KEYS[1]).ok",
        r"
if t == 'zset' then
  local n = now()
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', n)
  if redis.call('EXISTS', KEYS[1]) == 1 then
    local pttl = redis.call('PTTL', KEYS[1])
    local mark = tonumber(ARGV[4])
    if mark > 0 then
      redis.call('ZADD', KEYS[3], n + mark, ARGV[1])
      redis.call('PEXPIRE', KEYS[3], mark)
      return {3, math.min(pttl, math.floor(mark / 3))}
    end
    return {0, pttl}
  end
  t = 'none'
end
if t == 'none' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if ARGV[6] == '1' or ARGV[5] == '1' then redis.call('ZREM', KEYS[3], ARGV[1]) end
  if ARGV[3] == '1' then return {1, redis.call('INCR', KEYS[2])} end
  return {1, 0}
end
if t ~= 'string' then
  return redis.error_reply('WRONGTYPE the key holds a ' .. t .. ', not a lock')
end
if ARGV[5] == '1' and redis.call('GET', KEYS[1]) == ARGV[1] then
  if ARGV[3] == '1' then return {1, tonumber(redis.call('GET', KEYS[2]) or '0')} end
  return {1, 0}
end
return {0, redis.call('PTTL', KEYS[1])}"
    )
}

/// A reader's attempt (KEYS: lock, fencing counter, writers' marks; ARGV: token, lease ms,
/// fencing `1`/`0`): a share of its own unless a writer holds the key or — for a plain reader —
/// a writer's mark is live, or — for an upgradable reader (token `^…`) — another upgradable
/// share is → {1, the last write grant's fencing token or 0}; a share already ours (a retry) is
/// renewed. Busy → {0, ms to wait: the writer's pttl, until the first mark lapses, or the other
/// upgradable share's end}.
///
/// Marks hold back plain readers only. An upgradable request is exclusive among its kind, as a
/// writer is, and is admitted as a writer is: beside a waiting writer, which it races on each
/// release as writers race each other. Held back by marks as readers are, it could only join in
/// the rare moments with no writer waiting, one upgradable read per moment: under a write-heavy
/// load (the long history run: 3 rounds in 8 writing, 128 tasks) an upgradable request waited
/// over a minute. A writer is not starved in turn: upgradable reads never overlap each other,
/// so each release of one is a race the writer can win.
pub(super) fn read() -> String {
    format!(
        "{HELPERS}{}{REFUSE_SEMAPHORE}{}",
        r"
local t = redis.call('TYPE', KEYS[1]).ok",
        r"
if t == 'string' then return {0, redis.call('PTTL', KEYS[1])} end
if t ~= 'none' and t ~= 'zset' then
  return redis.error_reply('WRONGTYPE the key holds a ' .. t .. ', not a lock')
end
local n = now()
local lease = tonumber(ARGV[2])
if t == 'zset' then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', n) end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if string.sub(ARGV[1], 1, 1) ~= '^' then
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', n)
    local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    if first[2] then return {0, tonumber(first[2]) - n} end
  elseif t == 'zset' then
    local shares = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
    for i = 1, #shares, 2 do
      if string.sub(shares[i], 1, 1) == '^' then return {0, tonumber(shares[i + 1]) - n} end
    end
  end
end
redis.call('ZADD', KEYS[1], n + lease, ARGV[1])
if redis.call('PTTL', KEYS[1]) < lease then redis.call('PEXPIRE', KEYS[1], lease) end
if ARGV[3] == '1' then return {1, tonumber(redis.call('GET', KEYS[2]) or '0')} end
return {1, 0}"
    )
}

/// Several locks, all or nothing (KEYS: a (lock, fencing counter, writers' marks) triple per
/// lock, in canonical order; ARGV: lease ms, fencing `1`/`0`, shared `1`/`0`, then each lock's
/// owner token): every
/// lock is looked at first, as `write` (or `read`) would without marking anything; if all are
/// free, or already ours (a retry), all are taken → {1, a fencing token or 0 per lock}. The
/// first busy one stops it, nothing taken → {0, its index from 0, its ms to wait}; a semaphore's
/// name → {2, its index, its limit}.
pub(super) fn acquire_all() -> String {
    format!(
        "{HELPERS}{}",
        r"
local n = now()
local lease = tonumber(ARGV[1])
local fenced = ARGV[2] == '1'
local shared = ARGV[3] == '1'
local count = #KEYS / 3
local kinds = {}
for i = 1, count do
  local key, writers, token = KEYS[3 * i - 2], KEYS[3 * i], ARGV[3 + i]
  local t = redis.call('TYPE', key).ok
  if t == 'zset' then
    local limit = redis.call('ZSCORE', key, '#permits')
    if limit then return {2, i - 1, -tonumber(limit)} end
    redis.call('ZREMRANGEBYSCORE', key, '-inf', n)
    if redis.call('EXISTS', key) == 0 then t = 'none' end
  end
  if t ~= 'none' and t ~= 'zset' and t ~= 'string' then
    return redis.error_reply('WRONGTYPE the key holds a ' .. t .. ', not a lock')
  end
  if t == 'string' then
    if shared or redis.call('GET', key) ~= token then
      return {0, i - 1, redis.call('PTTL', key)}
    end
  elseif t == 'zset' and not shared then
    return {0, i - 1, redis.call('PTTL', key)}
  end
  if shared and not (t == 'zset' and redis.call('ZSCORE', key, token)) then
    redis.call('ZREMRANGEBYSCORE', writers, '-inf', n)
    local first = redis.call('ZRANGE', writers, 0, 0, 'WITHSCORES')
    if first[2] then return {0, i - 1, tonumber(first[2]) - n} end
  end
  kinds[i] = t
end
local out = {1}
for i = 1, count do
  local key, fence, writers, owner = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[3 + i]
  local token = 0
  if shared then
    redis.call('ZADD', key, n + lease, owner)
    if redis.call('PTTL', key) < lease then redis.call('PEXPIRE', key, lease) end
    if fenced then token = tonumber(redis.call('GET', fence) or '0') end
  elseif kinds[i] == 'string' then
    if fenced then token = tonumber(redis.call('GET', fence) or '0') end
  else
    redis.call('SET', key, owner, 'PX', lease)
    redis.call('ZREM', writers, owner)
    if fenced then token = redis.call('INCR', fence) end
  end
  out[i + 1] = token
end
return out"
    )
}

/// A semaphore's permit (KEYS: lock, fencing counter; ARGV: token, lease ms, fencing `1`/`0`,
/// limit): a permit of its own if fewer than `limit` are live → {1, a new fencing token or 0};
/// a permit already ours (a retry) is renewed. All in use → {0, ms until the first permit's
/// lease ends}. A name held as a lock or a read lock, or a semaphore whose holders took their
/// permits under another limit → {2, their limit, or 0}. Lapsed permits are dropped first, by
/// the server's clock: the count is the set of live permits.
pub(super) fn permit() -> String {
    format!(
        "{HELPERS}{}",
        r"
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'string' then return {2, 0} end
if t ~= 'none' and t ~= 'zset' then
  return redis.error_reply('WRONGTYPE the key holds a ' .. t .. ', not a semaphore')
end
local n = now()
local lease = tonumber(ARGV[2])
local limit = tonumber(ARGV[4])
if t == 'zset' then
  local held = redis.call('ZSCORE', KEYS[1], '#permits')
  if not held then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', n)
    if redis.call('EXISTS', KEYS[1]) == 1 then return {2, 0} end
  else
    redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, n)
    local count = redis.call('ZCARD', KEYS[1]) - 1
    held = -tonumber(held)
    if count > 0 and held ~= limit then return {2, held} end
    if count >= limit and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
      local first = redis.call('ZRANGEBYSCORE', KEYS[1], 0, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      return {0, tonumber(first[2]) - n}
    end
  end
end
redis.call('ZADD', KEYS[1], n + lease, ARGV[1], -limit, '#permits')
if redis.call('PTTL', KEYS[1]) < lease then redis.call('PEXPIRE', KEYS[1], lease) end
if ARGV[3] == '1' then return {1, redis.call('INCR', KEYS[2])} end
return {1, 0}"
    )
}

/// A reader's (or a permit's) release (KEYS: lock; ARGV: token): its share goes; the key then
/// lives until the longest remaining share ends. The last reader's departure wakes the
/// waiters, and so does an upgradable share's (another upgradable reader may wait) and the
/// departure that leaves an upgradable share alone (it may be waiting to upgrade); every
/// permit's does (a permit is free). 1 if the share was live.
pub(super) fn release_read() -> String {
    format!(
        "{HELPERS}{}",
        r"
if redis.call('TYPE', KEYS[1]).ok ~= 'zset' then return 0 end
local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not ends then return 0 end
local n = now()
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, n)
local semaphore = redis.call('ZSCORE', KEYS[1], '#permits')
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] and tonumber(last[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(last[2]) - n))
  if semaphore or string.sub(ARGV[1], 1, 1) == '^'
      or (string.sub(last[1], 1, 1) == '^' and redis.call('ZCARD', KEYS[1]) == 1) then
    redis.call('PUBLISH', KEYS[1], 'released')
  end
else
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[1], 'released')
end
if tonumber(ends) > n then return 1 end
return 0"
    )
}

/// An upgradable share's upgrade (KEYS: lock, fencing counter, writers' marks; ARGV: token,
/// lease ms, fencing `1`/`0`, mark ms, abandon `1`/`0`). The share the key's only live one →
/// it becomes the plain lock holding the same token, with the lease as its TTL → {1, a new
/// fencing token or 0}; already upgraded (a retry) → {1, the current token or 0}. Other
/// readers live → the key is marked against new readers for ARGV[4] ms → {0, ms until the
/// other shares end, at most a third of the mark}. The share gone → {-1}. With ARGV[5] = `1`
/// (an upgrade given up): its mark goes, waking the readers it held back if it was the last
/// → {0, 0}.
pub(super) fn upgrade() -> String {
    format!(
        "{HELPERS}{}",
        r"
local t = redis.call('TYPE', KEYS[1]).ok
if ARGV[5] == '1' then
  if redis.call('ZREM', KEYS[3], ARGV[1]) == 1 and redis.call('EXISTS', KEYS[3]) == 0 then
    redis.call('PUBLISH', KEYS[1], 'released')
  end
  return {0, 0}
end
if t == 'string' then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1} end
  if ARGV[3] == '1' then return {1, tonumber(redis.call('GET', KEYS[2]) or '0')} end
  return {1, 0}
end
if t ~= 'zset' then return {-1} end
local n = now()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', n)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return {-1} end
local shares = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local others = 0
for i = 1, #shares, 2 do
  if shares[i] ~= ARGV[1] then others = math.max(others, tonumber(shares[i + 1]) - n) end
end
if others > 0 then
  local mark = tonumber(ARGV[4])
  redis.call('ZADD', KEYS[3], n + mark, ARGV[1])
  if redis.call('PTTL', KEYS[3]) < mark then redis.call('PEXPIRE', KEYS[3], mark) end
  return {0, math.min(others, math.floor(mark / 3))}
end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[1])
if ARGV[3] == '1' then return {1, redis.call('INCR', KEYS[2])} end
return {1, 0}"
    )
}

/// Hand-over between two tasks of one client: if the lock holds ARGV[1], it now holds ARGV[2]
/// with a lease of ARGV[3] ms (and a new fencing token from KEYS[2] if ARGV[4] is 1) → the
/// fencing token, or 0. If ARGV[5] is 1 (a retry whose first reply was lost) a lock already
/// holding ARGV[2] counts as handed. Otherwise → -1: it was not ours, nothing changed.
///
/// The hot path of a contended lock (every hand-over in a row), so it asks for the token with
/// one `GET` and no `TYPE`: a key of another type (readers' shares) answers it with an error,
/// which `pcall` turns into a value that equals no token.
pub(super) fn hand_over() -> String {
    r"
local v = redis.pcall('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  if ARGV[4] == '1' then return redis.call('INCR', KEYS[2]) end
  return 0
end
if ARGV[5] == '1' and v == ARGV[2] then
  if ARGV[4] == '1' then return tonumber(redis.call('GET', KEYS[2]) or '0') end
  return 0
end
return -1"
        .to_owned()
}

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

/// The part of the fair-lock scripts that finds the next in line (after `HELPERS`):
/// `next_in_line(now)` drops, from the head of the queue (KEYS[2], a
/// list of tokens), waiters whose place (score in KEYS[3], a sorted set of deadlines) has
/// lapsed, and returns the head's token or nil.
const FAIR_HEAD: &str = r"
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
/// A semaphore's name → {2, its limit}.
/// A busy lock costs no look at the queue beyond joining it.
pub(super) fn acquire_fair() -> String {
    format!(
        "{HELPERS}{FAIR_HEAD}{}{REFUSE_SEMAPHORE}{}",
        r"
local t = redis.call('TYPE', KEYS[1]).ok",
        r"
local v = false
if t == 'string' then v = redis.call('GET', KEYS[1]) elseif t ~= 'none' then v = '' end
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
        "{HELPERS}{FAIR_HEAD}{}",
        r"
if holder(KEYS[1]) == ARGV[1] then
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

/// Reads one lock for the admin API into `found` — {value or nil, pttl, fence or nil, waiters,
/// {reader (or permit) token, ms left, …}, a semaphore's limit or 0}; KEYS = the lock, its fencing counter, its fair queue, its
/// writers' marks. A plain lock has a value; readers' shares have none, and are listed. Returns
/// nil for any other type: foreign keys are skipped, not failed on. Waiters are those of the
/// fair queue and the writers marking the readers' key.
macro_rules! read_lock {
    () => {
        r"
local ty = redis.call('TYPE', KEYS[1]).ok
if ty ~= 'string' and ty ~= 'zset' then return false end
local fence = false
if redis.call('TYPE', KEYS[2]).ok == 'string' then fence = redis.call('GET', KEYS[2]) end
local waiting = 0
if redis.call('TYPE', KEYS[3]).ok == 'list' then waiting = redis.call('LLEN', KEYS[3]) end
if redis.call('TYPE', KEYS[4]).ok == 'zset' then waiting = waiting + redis.call('ZCARD', KEYS[4]) end
local value = false
local readers = {}
local permits = 0
if ty == 'zset' then
  local t = redis.call('TIME')
  t = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local shares = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  for i = 1, #shares, 2 do
    local left = tonumber(shares[i + 1]) - t
    if shares[i] == '#permits' then
      permits = -tonumber(shares[i + 1])
    elseif left > 0 then
      readers[#readers + 1] = shares[i]
      readers[#readers + 1] = left
    end
  end
  if #readers == 0 then return false end
else
  value = redis.call('GET', KEYS[1])
end
local found = {value, redis.call('PTTL', KEYS[1]), fence, waiting, readers, permits}
"
    };
}

/// The admin API's look at one lock (read-only): see `read_lock!`.
pub(super) const INSPECT: &str = concat!(read_lock!(), "return found");

/// A forced release: the lock as `INSPECT` reads it, then deleted whoever holds it (a writer, or
/// every reader), and every waiter woken (`released`: a fair lock's next in line asks again and
/// finds it free).
pub(super) const FORCE_RELEASE: &str = concat!(
    read_lock!(),
    "redis.call('DEL', KEYS[1])\nredis.call('PUBLISH', KEYS[1], 'released')\nreturn found"
);

/// A forced release of the tokens ARGV only: the lock as `INSPECT` reads it, deleted (and its
/// waiters woken) only if its value is one of them. Redlock's forced release, whose delete may
/// reach a node after a new holder's grant there: it must not remove that grant.
pub(super) const FORCE_RELEASE_IF: &str = concat!(
    read_lock!(),
    "for i = 1, #ARGV do\n  if value == ARGV[i] then\n    redis.call('DEL', KEYS[1])\n    \
     redis.call('PUBLISH', KEYS[1], 'released')\n    break\n  end\nend\nreturn found"
);
