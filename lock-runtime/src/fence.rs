//! Fenced writes: storage that refuses a write from a holder whose lock has already passed on.
//!
//! A lease lock cannot stop a holder that was paused (a GC pause, SIGSTOP, a VM migration)
//! past its lease: when it resumes it still believes it holds the lock, while somebody else
//! does. Only the resource it writes to can tell, if every write carries the writer's
//! [fencing token](crate::LockGuard::fencing_token) and the resource keeps the highest token
//! it has accepted: a write with a smaller token is stale and is rejected.
//!
//! Two ready-made forms:
//!
//! - **Redis**: [`REDIS_FENCED_SET`], a Lua script that stores a value together with the highest
//!   token in one hash (`HGET key value`, `HGET key fence`) and writes only if the caller's
//!   token is ≥ the highest seen. One key, so it works in a Redis Cluster too. Run it with
//!   your own Redis client (distlock's API names no redis-rs type, so your redis-rs version is
//!   yours to choose): with redis-rs,
//!   `redis::Script::new(REDIS_FENCED_SET).key(resource).arg(token).arg(value).invoke_async(&mut conn)`
//!   gives `(1, token)` when written and `(0, highest)` when refused.
//! - **SQL**: [`SQL_FENCED_UPDATE`], an `UPDATE … WHERE fence <= $1` on a `fence` column of the
//!   row itself; zero rows updated means the write was stale.
//!
//! `≥` (rather than `>`) lets one holder write several times under one token; a token that was
//! superseded by a later grant can never write again, because the later holder's first write
//! raised the fence above it. A later holder that has not written yet does not fence anybody
//! out — which is harmless: until it writes, the stale holder's write is the latest state.
//!
//! ```
//! # use distlock_runtime as distlock;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), distlock::LockError> {
//! let client = distlock::LockClient::builder("memory://fence-doc").fencing(true).build().await?;
//! let guard = client.lock("account:7").acquire().await?;
//! let token = guard.fencing_token().expect("fencing is on");
//! // Redis: EVAL REDIS_FENCED_SET 1 account:7 <token> balance=10   -> {1, token} or {0, highest}
//! // SQL:   UPDATE accounts SET balance = 10, fence = $token WHERE id = 7 AND fence <= $token
//! # let _ = token;
//! guard.release().await
//! # }
//! ```

/// Lua for Redis: `KEYS[1]` = the hash holding the resource, `ARGV[1]` = the writer's fencing
/// token, `ARGV[2]` = the value. Returns `{1, token}` when written, `{0, highest}` when the
/// token is smaller than the highest already accepted (the write is stale and nothing changes).
pub const REDIS_FENCED_SET: &str = r"
local highest = tonumber(redis.call('HGET', KEYS[1], 'fence') or '-1')
local token = tonumber(ARGV[1])
if token == nil then
  return redis.error_reply('fencing token must be a number')
end
if token < highest then
  return {0, highest}
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return {1, token}
";

/// The SQL form (PostgreSQL placeholders; `?` on MySQL): add a `fence BIGINT NOT NULL DEFAULT
/// 0` column to the row the lock protects and guard every write with it. `$1` = the fencing
/// token, `$2` = the new value, `$3` = the row id. One row updated: written; zero rows: stale.
///
/// On MySQL / MariaDB write `?` for each placeholder in order of appearance, so the parameters
/// are `(value, token, id, token)`. A holder paused past its lease then updates no row once the
/// next holder has written.
pub const SQL_FENCED_UPDATE: &str =
    "UPDATE resource SET value = $2, fence = $1 WHERE id = $3 AND fence <= $1";
