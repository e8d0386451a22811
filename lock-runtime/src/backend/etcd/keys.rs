//! What an `etcd://` URL says, and where a lock's keys live: its queue under the prefix, and
//! each acquisition's place in it.

use std::sync::{Mutex, MutexGuard};

use super::EtcdBackend;
use super::proto::KeyValue;
use crate::backend::Kind;
use crate::error::LockError;
use crate::fast_map::FastMap;

/// The etcd client port when a host names none.
const DEFAULT_PORT: u16 = 2379;
/// Where lock keys live when the URL names no prefix.
const DEFAULT_PREFIX: &str = "distlock";

/// What an `etcd://` or `etcds://` URL says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EtcdUrl {
    /// `etcds://`: TLS to every member.
    pub secure: bool,
    /// `user:password@`: etcd's authentication (a token, renewed when it expires).
    pub credentials: Option<super::rpc::Credentials>,
    /// `host:port` of each member.
    pub hosts: Vec<String>,
    /// The key prefix, without a trailing `/`.
    pub prefix: String,
}

/// Parses `etcd://h1:2379,h2:2379[/prefix]`.
pub(crate) fn parse_url(url: &str) -> Result<EtcdUrl, LockError> {
    let shown = crate::url::redact_url(url);
    let bad = |why: String| LockError::Config(format!("invalid etcd URL `{shown}`: {why}"));
    let (secure, rest) = match (url.strip_prefix("etcd://"), url.strip_prefix("etcds://")) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ => {
            return Err(bad(
                "expected `etcd://[user:password@]host:port[,host:port…][/prefix]` (or \
                 `etcds://` for TLS)"
                    .into(),
            ));
        }
    };
    if let Some((_, query)) = rest.split_once('?') {
        return Err(bad(format!(
            "unknown parameters `{query}` (an etcd URL takes `cacert`, `cert` and `key`, with \
             `etcds://`)"
        )));
    }
    let (authority, prefix) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash + 1..]),
        None => (rest, ""),
    };
    let (credentials, hosts) = match authority.rsplit_once('@') {
        None => (None, authority),
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, password)) if !user.is_empty() => {
                let decode = crate::url::percent_decode;
                let credentials = super::rpc::Credentials {
                    name: decode(user),
                    password: decode(password),
                };
                (Some(credentials), hosts)
            }
            _ => {
                return Err(bad("etcd authentication needs a user and a password \
                     (`etcd://user:password@host:port`)"
                    .into()));
            }
        },
    };
    let listed = crate::url::host_list(hosts, DEFAULT_PORT).map_err(bad)?;
    let prefix = prefix.trim_end_matches('/');
    if prefix.chars().any(char::is_control) {
        return Err(bad(format!(
            "the key prefix {prefix:?} contains control characters"
        )));
    }
    Ok(EtcdUrl {
        secure,
        credentials,
        hosts: listed,
        prefix: if prefix.is_empty() {
            DEFAULT_PREFIX.to_owned()
        } else {
            prefix.to_owned()
        },
    })
}

/// What ends a reader's key in a lock's queue (see [`Slots::key`]).
const READER: &str = "-r";
/// What ends an upgradable reader's key (a reader's, for every other rule).
const UPGRADABLE: &str = "-u";

/// The kind of hold a queue key's last path segment asks for (see [`Slots::key`]); a key of
/// another recipe (etcd's own `concurrency.Mutex`: `<lease id in hex>`) is exclusive.
pub(crate) fn kind_in(segment: &str) -> Kind {
    if segment.ends_with(READER) || segment.ends_with(UPGRADABLE) {
        return Kind::Shared;
    }
    if let Some((_, limit)) = segment.rsplit_once("-p")
        && !limit.starts_with('+')
        && let Ok(limit) = limit.parse()
    {
        return Kind::Permits(limit);
    }
    Kind::Exclusive
}

/// The kind of hold a queue key asks for.
pub(super) fn kind_of(kv: &KeyValue) -> Kind {
    let key = std::str::from_utf8(&kv.key).unwrap_or_default();
    kind_in(key.rsplit_once('/').map_or(key, |(_, segment)| segment))
}

/// A queue key as the rules of upgradable reads see it: its kind, and whether it is an
/// upgradable reader's.
pub(super) fn entry_of(kv: &KeyValue) -> crate::backend::queue::Entry {
    let key = std::str::from_utf8(&kv.key).unwrap_or_default();
    let segment = key.rsplit_once('/').map_or(key, |(_, segment)| segment);
    crate::backend::queue::Entry {
        kind: kind_in(segment),
        upgradable: segment.ends_with(UPGRADABLE),
    }
}

/// The part of every key of lock `name` before its own part: `<name>/`, with `%` and `/`
/// in the name percent-encoded so that one lock's keys never fall inside another's range.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn queue_of(name: &str) -> String {
    let mut queue = String::with_capacity(name.len() + 1);
    push_queue(&mut queue, name);
    queue
}

/// Appends `name`'s queue (see [`queue_of`]) to `out`.
pub(super) fn push_queue(out: &mut String, name: &str) {
    let mut rest = name;
    // Runs of plain characters are copied whole: most names have no `%` or `/` at all.
    while let Some(at) = rest.find(['%', '/']) {
        out.push_str(&rest[..at]);
        out.push_str(if rest.as_bytes()[at] == b'%' {
            "%25"
        } else {
            "%2F"
        });
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
    out.push('/');
}

impl EtcdBackend {
    /// The full key of lock `name`'s queue: `<prefix>/<name>/`.
    pub(super) fn queue_key(&self, name: &str) -> Vec<u8> {
        let mut key = String::with_capacity(self.prefix.len() + name.len() + 1);
        key.push_str(&self.prefix);
        push_queue(&mut key, name);
        key.into_bytes()
    }
}

/// The keys this client's acquisitions use, by owner token.
///
/// A key is named by its lease and a slot, not by its owner token (which is in its value): an
/// acquisition takes the lowest slot free on its lease in that queue, so a lock taken again and
/// again by one client puts the same key again and again, as etcd's own mutex does
/// (`<lease id in hex>`). etcd keeps a deleted key in its index until the cluster is compacted,
/// and every look at a queue walks past them: keys named by token piled up there, one per
/// acquisition (a name taken 20,000 times read its queue in 1.1 ms instead of 0.4 ms).
///
/// A slot is reserved from the attempt that first names it until its key is known gone —
/// deleted with an answer, or its lease lost — so a key whose deletion is still under way, or
/// whose acquiring transaction may still land, is never taken for a newer acquisition's.
#[derive(Default)]
pub(super) struct Slots(Mutex<SlotTable>);

#[derive(Default)]
struct SlotTable {
    /// The key reserved for each token, and the lease it is on.
    by_token: FastMap<String, (Vec<u8>, i64)>,
    /// The token of each reserved key.
    by_key: FastMap<Vec<u8>, String>,
}

impl Slots {
    fn table(&self) -> MutexGuard<'_, SlotTable> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `token`'s key in `queue` on `lease`: the one reserved for it already (a waiter keeps its
    /// place between attempts), or the lowest slot free: `<queue><lease id in hex>`, then
    /// `….1`, `….2`, …; a reader's ends in `-r` (an upgradable reader's in `-u`), a permit of a
    /// semaphore of `n` in `-p<n>`.
    /// A token's key on another lease (one given up) is let go: it dies with its lease.
    pub(super) fn key(&self, token: &str, queue: &[u8], lease: i64, kind: Kind) -> Vec<u8> {
        let mut base = Vec::with_capacity(queue.len() + 16);
        base.extend_from_slice(queue);
        // Writing to a Vec cannot fail.
        let _ = std::io::Write::write_fmt(&mut base, format_args!("{lease:x}"));
        let mut table = self.table();
        if let Some((key, on)) = table.by_token.get(token) {
            if *on == lease {
                return key.clone();
            }
            let (old, _) = table.by_token.remove(token).unwrap_or_default();
            table.by_key.remove(&old);
        }
        let mark = match kind {
            Kind::Exclusive => String::new(),
            Kind::Shared if crate::token::is_upgradable(token) => UPGRADABLE.to_owned(),
            Kind::Shared => READER.to_owned(),
            Kind::Permits(n) => format!("-p{n}"),
        };
        let key = (0u32..)
            .map(|slot| {
                let mut key = base.clone();
                if slot > 0 {
                    key.extend_from_slice(format!(".{slot}").as_bytes());
                }
                key.extend_from_slice(mark.as_bytes());
                key
            })
            .find(|key| !table.by_key.contains_key(key))
            .unwrap_or_default();
        table.by_key.insert(key.clone(), token.to_owned());
        table
            .by_token
            .insert(token.to_owned(), (key.clone(), lease));
        key
    }

    /// The key reserved for `token`, if any.
    pub(super) fn of(&self, token: &str) -> Option<Vec<u8>> {
        self.table().by_token.get(token).map(|(key, _)| key.clone())
    }

    /// The token `key` is reserved for, if any.
    pub(super) fn token_of(&self, key: &[u8]) -> Option<String> {
        self.table().by_key.get(key).cloned()
    }

    /// `token`'s key is gone: its slot is free for another acquisition.
    pub(super) fn free(&self, token: &str) {
        let mut table = self.table();
        if let Some((key, _)) = table.by_token.remove(token) {
            table.by_key.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let url = parse_url("etcd://a:1,b,[::1]:3/app/locks/").unwrap();
        assert_eq!(url.hosts, ["a:1", "b:2379", "[::1]:3"]);
        assert_eq!(url.prefix, "app/locks");
        assert_eq!(parse_url("etcd://a").unwrap().prefix, "distlock");
        for bad in [
            "etcd://",
            "etcd://a:x",
            "etcd://a,,b",
            "etcd://u@a",
            "etcd://a?x=1",
            "zk://a",
        ] {
            let err = parse_url(bad).expect_err(bad).to_string();
            assert!(err.contains("invalid etcd URL"), "{bad}: {err}");
        }
        let url = parse_url("etcds://app:p%40ss@a:1/x").unwrap();
        assert!(url.secure);
        let credentials = url.credentials.clone().unwrap();
        assert_eq!(
            (credentials.name.as_str(), credentials.password.as_str()),
            ("app", "p@ss")
        );
        assert!(!format!("{url:?}").contains("p@ss"));
        let err = parse_url("etcd://app:secret@a:x").unwrap_err().to_string();
        assert!(!err.contains("secret"), "{err}");
    }

    #[test]
    fn names_never_fall_into_another_locks_range() {
        assert_eq!(queue_of("lock:order:42"), "lock:order:42/");
        assert_eq!(queue_of("a/b"), "a%2Fb/");
        assert_eq!(queue_of("a%2Fb"), "a%252Fb/");
        assert_eq!(queue_of("%x/"), "%25x%2F/");
        assert_eq!(queue_of("é/ü"), "é%2Fü/");
        assert!(!queue_of("a/b").starts_with(&queue_of("a")));
    }

    #[test]
    fn a_slot_is_reused_once_free_and_never_while_reserved() {
        let slots = Slots::default();
        let key =
            |token, lease, kind| String::from_utf8(slots.key(token, b"p/q/", lease, kind)).unwrap();
        assert_eq!(key("a", 0xab, Kind::Exclusive), "p/q/ab");
        // Asked again (a waiter's next attempt): the same key.
        assert_eq!(key("a", 0xab, Kind::Exclusive), "p/q/ab");
        assert_eq!(key("b", 0xab, Kind::Exclusive), "p/q/ab.1");
        assert_eq!(key("r", 0xab, Kind::Shared), "p/q/ab-r");
        assert_eq!(key("s", 0xab, Kind::Permits(3)), "p/q/ab-p3");
        assert_eq!(key("^u", 0xab, Kind::Shared), "p/q/ab-u");
        assert_eq!(kind_in("ab-u"), Kind::Shared);
        assert_eq!(kind_in("ab.1-p3"), Kind::Permits(3));
        assert_eq!(kind_in("ab.2-r"), Kind::Shared);
        assert_eq!(kind_in("694d8a1b2c3d4e5f"), Kind::Exclusive);
        assert_eq!(slots.token_of(b"p/q/ab.1").as_deref(), Some("b"));
        slots.free("a");
        assert_eq!(slots.of("a"), None);
        assert_eq!(key("c", 0xab, Kind::Exclusive), "p/q/ab");
        // A token whose lease was given up takes a key on the new one (even one whose id in
        // hex begins the old one's).
        assert_eq!(key("b", 0xa, Kind::Exclusive), "p/q/a");
        assert_eq!(slots.token_of(b"p/q/ab.1"), None);
    }
}
