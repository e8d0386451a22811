//! Looking at locks from outside: who holds a key, since when, for how much longer, who
//! waits; listing the held locks; following them as they are taken and given back
//! ([`LockClient::watch`]); releasing one by force; checking the backend answers.
//!
//! This is what the `distlock` command line (`distlock-cli`) is built on, and what a service's
//! admin endpoint can call. None of it is needed to take locks.
//!
//! ```
//! # use distlock_runtime as distlock;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), distlock::LockError> {
//! use distlock::LockClient;
//!
//! let client = LockClient::connect("memory://admin-doc").await?;
//! let guard = client.lock("order:42").acquire().await?;
//! let info = client.inspect("order:42").await?.expect("held");
//! assert_eq!(info.holder.as_ref().map(|h| h.pid), Some(std::process::id()));
//! assert_eq!(client.list("order:*", 100).await?.len(), 1);
//! // Taken away from its holder, which learns it at its next renewal.
//! assert!(client.force_release("order:42").await?.is_some());
//! assert!(client.inspect("order:42").await?.is_none());
//! # drop(guard);
//! # Ok(()) }
//! ```

use std::time::{Duration, SystemTime};

mod check;
mod watch;

#[cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    feature = "zookeeper"
))]
pub(crate) use check::clock_check;
#[cfg(feature = "etcd")]
pub(crate) use check::identity_as;
#[cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    feature = "zookeeper",
    feature = "etcd"
))]
pub(crate) use check::identity_finding;
pub use check::{CHECK_KEY_PREFIX, Checkup, Finding};

pub(crate) use watch::{ChangeFeed, Follower};
pub use watch::{LockEvent, LockWatch};

use crate::LockClient;
use crate::error::{BoxError, LockError};
use crate::key::validate_key;
pub use crate::token::Holder;

/// One held lock, as the backend reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock key, without the client's prefix: `order:42`.
    pub key: String,
    /// The key in the backend: `lock:order:42` (`{lock:order:42}` in a Redis Cluster).
    pub name: String,
    /// The holder's owner token, when the backend stores one. Printing it is safe for a
    /// human, but anyone with it can release or renew the lock.
    pub token: Option<String>,
    /// Who holds it (host, process, since when): from the token distlock wrote, or the
    /// backend's own record; `None` for a lock another client took.
    pub holder: Option<Holder>,
    /// How long until the lease runs out unless renewed; `None` when the backend keeps the
    /// lock alive by a session (ZooKeeper) or the key has no expiry (a foreign lock).
    pub ttl: Option<Duration>,
    /// The last fencing token handed out for the key, when fencing was ever used on it.
    pub fencing_token: Option<u64>,
    /// How many acquisitions wait in the lock's queue, where the backend keeps one (a fair
    /// lock on Redis, ZooKeeper, etcd, and the writers waiting for a read lock's readers);
    /// `None` where waiters leave no trace on the server.
    pub waiters: Option<u64>,
    /// [`LockMode::Read`](crate::LockMode::Read) when readers (or a semaphore's permit
    /// holders) hold the key, listed in `readers` (`token` and `holder` are then `None`); else
    /// the write side: the plain lock.
    pub mode: crate::LockMode,
    /// A read lock's readers, or a semaphore's permit holders: longest remaining lease first.
    pub readers: Vec<ReaderInfo>,
    /// For a semaphore, its limit (the permits its holders took theirs under; `readers` lists
    /// the permits held); `None` for a lock.
    pub permits: Option<u16>,
}

/// One reader of a read lock (or holder of a semaphore's permit), as the backend reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReaderInfo {
    /// The reader's owner token.
    pub token: String,
    /// Who it is (host, process, since when), read from the token distlock wrote.
    pub holder: Option<Holder>,
    /// How long until this reader's own lease runs out unless renewed.
    pub ttl: Option<Duration>,
}

/// What [`LockClient::ping`] learned about the backend.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerInfo {
    /// The backend kind: `redis`, `postgres`, …
    pub backend: &'static str,
    /// The URL, password redacted.
    pub url: String,
    /// The server's version as it reports it (every node's, comma-separated, for several).
    pub version: String,
    /// The time one request took, after the connection was made.
    pub round_trip: Duration,
}

/// A lock as a backend reports it, before the client turns its name into a key.
#[derive(Debug, Clone, Default)]
pub(crate) struct Entry {
    pub name: String,
    pub token: Option<String>,
    /// The backend's own record of the holder (SQL `holder` column, ZooKeeper/etcd node data);
    /// otherwise the client reads it from the token.
    pub holder: Option<Holder>,
    pub ttl: Option<Duration>,
    pub fencing_token: Option<u64>,
    pub waiters: Option<u64>,
    /// A read lock's readers, or a semaphore's permits: each one's token and remaining lease
    /// (empty for a plain lock, whose holder is `token`).
    pub readers: Vec<(String, Option<Duration>)>,
    /// A semaphore's limit (`readers` are then its permits).
    pub permits: Option<u16>,
}

impl Entry {
    /// A lock `name` held by the readers `tokens` (no TTL per share: a backend that keeps its
    /// locks alive by a session or lease), with `waiters` more in its queue.
    #[cfg_attr(not(any(feature = "zookeeper", feature = "etcd")), allow(dead_code))]
    pub(crate) fn read_by(name: &str, tokens: Vec<String>, waiters: Option<u64>) -> Entry {
        Entry {
            name: name.to_owned(),
            waiters,
            readers: tokens.into_iter().map(|token| (token, None)).collect(),
            ..Entry::default()
        }
    }
}

/// The PostgreSQL advisory-lock key (`pg_advisory_lock(k)`) that `postgres://…?mode=advisory`
/// uses for the backend name `name` — the key with the client's prefix, `lock:order:42` —
/// so another program can take or watch the same lock: the 64-bit FNV-1a hash of its bytes.
///
/// ```
/// # use distlock_runtime as distlock;
/// assert_eq!(distlock::admin::advisory_key("a") as u64, 0xaf63_dc4c_8601_ec8c);
/// ```
pub fn advisory_key(name: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash as i64
}

/// The MySQL / MariaDB named lock (`GET_LOCK(n, …)`) that `mysql://…/database?mode=named`
/// takes for the backend name `name` (the key with the client's prefix, `lock:order:42`), so
/// another program can take or watch the same lock. A server's named locks are server-wide;
/// distlock's belong to the URL's database, as its lock table does: `n` is
/// `<database>/<name>` when that is at most 64 printable ASCII characters without upper case
/// (MySQL 8 compares names case-insensitively), `~` or `\`, and does not start with
/// `distlock#`; otherwise `distlock#` and the 16 hex digits of [`advisory_key`] of
/// `<database>/<name>` (two names with one hash exclude each other: never two holders of one
/// name). Without a database in the URL, `<name>` alone.
///
/// ```
/// # use distlock_runtime as distlock;
/// use distlock::admin::mysql_lock_name;
/// assert_eq!(mysql_lock_name("shop", "lock:order:42"), "shop/lock:order:42");
/// assert_eq!(mysql_lock_name("", "lock:order:42"), "lock:order:42");
/// assert_eq!(mysql_lock_name("shop", "lock:Order:42").len(), 25);
/// assert!(mysql_lock_name("shop", &"x".repeat(60)).starts_with("distlock#"));
/// ```
pub fn mysql_lock_name(database: &str, name: &str) -> String {
    let scoped = match database {
        "" => name.to_owned(),
        database => format!("{database}/{name}"),
    };
    let verbatim = (1..=64).contains(&scoped.len())
        && !scoped.starts_with("distlock#")
        && scoped
            .bytes()
            .all(|b| b.is_ascii_graphic() && !b.is_ascii_uppercase() && !matches!(b, b'~' | b'\\'));
    if verbatim {
        scoped
    } else {
        format!("distlock#{:016x}", advisory_key(&scoped) as u64)
    }
}

/// What a store's [`list`](crate::backend::Admin::list) is asked for: at most `limit` locks
/// whose backend names are `prefix` followed by a key matching the glob `pattern`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Listing<'a> {
    pub prefix: &'a str,
    pub pattern: &'a str,
    pub limit: usize,
}

impl Listing<'_> {
    /// Whether the backend name `name` is asked for.
    pub(crate) fn matches(&self, name: &str) -> bool {
        name.strip_prefix(self.prefix)
            .is_some_and(|key| glob_match(self.pattern, key))
    }
}

/// Whether `text` matches the glob `pattern`: `*` any run of characters, `?` one character,
/// `\` makes the next character literal; everything else stands for itself.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Iterative matching with one backtrack point for the last `*`: linear in practice.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < t.len() {
        match p.get(i) {
            Some('*') => {
                star = Some((i, j));
                i += 1;
                continue;
            }
            Some('?') => {
                i += 1;
                j += 1;
                continue;
            }
            Some('\\') if p.get(i + 1) == Some(&t[j]) => {
                i += 2;
                j += 1;
                continue;
            }
            Some(&c) if c != '\\' && c == t[j] => {
                i += 1;
                j += 1;
                continue;
            }
            _ => {}
        }
        match star {
            Some((si, sj)) => {
                i = si + 1;
                j = sj + 1;
                star = Some((si, sj + 1));
            }
            None => return false,
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

impl LockClient {
    /// How many of the `permits` of the semaphore `key` are held right now: its holders whose
    /// lease has not run out (waiters in its queue are not counted), at most `permits`.
    /// [`SemaphoreRequest::available`](crate::SemaphoreRequest::available) is the public face.
    pub(crate) async fn permits_in_use(&self, key: &str, permits: u16) -> Result<u16, LockError> {
        use crate::backend::{Kind, Refused};
        validate_key(key)?;
        let asked = Kind::Permits(permits);
        self.admin_backend()
            .capabilities()
            .require(crate::Feature::Semaphores, Some(key))?;
        let name = self.name_of(key);
        let entry = self
            .admin_backend()
            .inspect(&name)
            .await
            .map_err(|e| self.admin_error("available", key, e))?;
        let Some(entry) = entry else {
            return Ok(0);
        };
        let held = match entry.permits {
            Some(limit) => Kind::Permits(limit),
            // A lock, or its readers.
            None => Kind::Exclusive,
        };
        if let Some(why) = Refused::between(held, asked) {
            return Err(LockError::Config(format!("`{key}`: {why}")));
        }
        let live = entry
            .readers
            .iter()
            .filter(|(_, ttl)| ttl.is_none_or(|ttl| !ttl.is_zero()))
            .count();
        Ok(u16::try_from(live).unwrap_or(u16::MAX).min(permits))
    }

    /// Takes and gives back `key` with the store's own two commands and nothing else — a
    /// conditional create holding a fresh token for 30 s, then its delete, on this client's
    /// connection: no renewal, guard, fencing or waiting — what any lock on this store costs
    /// at least, beside which `distlock bench` sets distlock's own figures. `Ok(false)` where
    /// it is not measured (Redlock, `memory://`, the advisory and named modes); an error if
    /// the key was held (it is not taken from anyone).
    ///
    /// Errors: [`LockError::Backend`] when the store fails or the key is held.
    pub async fn raw_pair(&self, key: &str) -> Result<bool, LockError> {
        validate_key(key)?;
        let name = self.name_of(key);
        let token = crate::token::OwnerToken::generate();
        let token = token.as_str();
        let pair = self
            .admin_backend()
            .raw_pair(&name, token, std::time::Duration::from_secs(30));
        match pair.await {
            None => Ok(false),
            Some(Ok(())) => Ok(true),
            Some(Err(error)) => Err(self.admin_error("raw_pair", key, error)),
        }
    }

    /// Who holds `key` now: `None` if nobody does.
    ///
    /// Errors: [`LockError::Backend`] when the backend fails.
    pub async fn inspect(&self, key: &str) -> Result<Option<LockInfo>, LockError> {
        validate_key(key)?;
        let name = self.name_of(key);
        let entry = self
            .admin_backend()
            .inspect(&name)
            .await
            .map_err(|e| self.admin_error("inspect", key, e))?;
        Ok(entry.and_then(|entry| self.info(entry)))
    }

    /// The held locks whose key matches the glob `pattern` (`*` any characters, `?` one, `\`
    /// escapes; `*` for all), at most `limit` of them, sorted by key.
    pub async fn list(&self, pattern: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        let entries = self
            .admin_backend()
            .list(Listing {
                prefix: self.prefix(),
                pattern,
                limit,
            })
            .await
            .map_err(|e| self.admin_error("list", pattern, e))?;
        let mut infos: Vec<LockInfo> = entries
            .into_iter()
            .filter_map(|entry| self.info(entry))
            .filter(|info| glob_match(pattern, &info.key))
            .collect();
        infos.sort_by(|a, b| a.key.cmp(&b.key));
        infos.truncate(limit);
        Ok(infos)
    }

    /// Deletes the lock `key` whoever holds it, wakes its waiters, and returns what it removed
    /// (`None`: nobody held it). The holder is not asked: it learns at its next renewal that
    /// its lock is gone ([`LockGuard::is_lost`](crate::LockGuard::is_lost)), and may still be
    /// running its critical section until then — use it to clear a lock whose holder is gone,
    /// and fencing tokens where overlapping work must be refused.
    pub async fn force_release(&self, key: &str) -> Result<Option<LockInfo>, LockError> {
        validate_key(key)?;
        let name = self.name_of(key);
        let entry = self
            .admin_backend()
            .force_release(&name)
            .await
            .map_err(|e| self.admin_error("release", key, e))?;
        Ok(entry.and_then(|entry| self.info(entry)))
    }

    /// Checks the backend answers: its version, and how long one request takes once
    /// connected.
    pub async fn ping(&self) -> Result<ServerInfo, LockError> {
        let backend = self.admin_backend();
        let fail = |e| self.admin_error("ping", "", e);
        // The first request may (re)connect; the second is the round trip.
        backend.server_version().await.map_err(fail)?;
        let started = std::time::Instant::now();
        let version = backend.server_version().await.map_err(fail)?;
        Ok(ServerInfo {
            backend: backend.store(),
            url: self.url().to_owned(),
            version,
            round_trip: started.elapsed(),
        })
    }

    fn info(&self, entry: Entry) -> Option<LockInfo> {
        let key = self.key_of(&entry.name)?;
        // The record (SQL, ZooKeeper, etcd) names the host and when the lock was granted; the
        // token, an election leader's identity.
        let from_token = entry.token.as_deref().and_then(Holder::from_token);
        let holder = match (entry.holder, from_token) {
            (Some(mut holder), Some(token)) => {
                holder.identity = token.identity;
                Some(holder)
            }
            (holder, token) => holder.or(token),
        };
        let mut readers: Vec<ReaderInfo> = entry
            .readers
            .into_iter()
            .map(|(token, ttl)| ReaderInfo {
                holder: Holder::from_token(&token),
                token,
                ttl,
            })
            .collect();
        readers.sort_by_key(|r| std::cmp::Reverse(r.ttl));
        let mode = if readers.is_empty() {
            crate::LockMode::Write
        } else {
            crate::LockMode::Read
        };
        Some(LockInfo {
            key,
            name: entry.name,
            token: entry.token,
            holder,
            ttl: entry.ttl,
            fencing_token: entry.fencing_token,
            waiters: entry.waiters,
            mode,
            readers,
            permits: entry.permits,
        })
    }

    fn admin_error(&self, op: &'static str, key: &str, error: BoxError) -> LockError {
        LockError::Backend {
            backend: self.backend_kind(),
            op,
            key: key.to_owned(),
            source: error,
        }
    }
}

/// A holder recorded as `<host> pid <n>` (SQL rows, ZooKeeper and etcd node data), since
/// `since_ms` (Unix milliseconds).
#[cfg_attr(
    not(any(
        feature = "postgres",
        feature = "mysql",
        feature = "zookeeper",
        feature = "etcd"
    )),
    allow(dead_code)
)]
pub(crate) fn holder_from_record(record: &str, since_ms: Option<u64>) -> Option<Holder> {
    let (host, pid) = record.trim().rsplit_once(" pid ")?;
    Some(Holder {
        host: host.to_owned(),
        pid: pid.trim().parse().ok()?,
        since: SystemTime::UNIX_EPOCH + Duration::from_millis(since_ms?),
        identity: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_like_redis_without_classes() {
        for (p, t, m) in [
            ("*", "", true),
            ("*", "order:42", true),
            ("order:*", "order:42", true),
            ("order:*", "orders:42", false),
            ("order:?", "order:4", true),
            ("order:?", "order:42", false),
            ("*:42", "order:42", true),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("a\\*", "a*", true),
            ("a\\*", "ab", false),
            ("[ab]", "[ab]", true),
            ("[ab]", "a", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
        ] {
            assert_eq!(glob_match(p, t), m, "{p:?} vs {t:?}");
        }
    }

    #[test]
    fn records_name_a_holder() {
        let h = holder_from_record("web-1 pid 42", Some(1_000)).unwrap();
        assert_eq!((h.host.as_str(), h.pid), ("web-1", 42));
        assert_eq!(h.since, SystemTime::UNIX_EPOCH + Duration::from_secs(1));
        assert_eq!(holder_from_record("nonsense", Some(1)), None);
    }
}
