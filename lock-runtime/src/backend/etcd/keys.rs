//! What an `etcd://` URL says, and where a lock's keys live: its queue under the prefix, and
//! each owner token's place in it.

use super::EtcdBackend;
use super::proto::KeyValue;
use crate::backend::Kind;
use crate::error::LockError;

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

/// What ends a reader's key in a lock's queue (see `EtcdBackend::key_of`).
const READER: &str = "-r";

/// The owner token and the kind of hold it asks for, from a key's last path segment (see
/// `EtcdBackend::key_of`).
pub(crate) fn token_in(segment: &str) -> (&str, Kind) {
    if let Some(token) = segment.strip_suffix(READER) {
        return (token, Kind::Shared);
    }
    if let Some((token, limit)) = segment.rsplit_once("-p")
        && !limit.starts_with('+')
        && let Ok(limit) = limit.parse()
    {
        return (token, Kind::Permits(limit));
    }
    (segment, Kind::Exclusive)
}

/// The kind of hold a queue key asks for.
pub(super) fn kind_of(kv: &KeyValue) -> Kind {
    let key = std::str::from_utf8(&kv.key).unwrap_or_default();
    token_in(key.rsplit_once('/').map_or(key, |(_, segment)| segment)).1
}

/// The part of every key of lock `name` before the owner token: `<name>/`, with `%` and `/`
/// in the name percent-encoded so that one lock's keys never fall inside another's range.
pub(crate) fn queue_of(name: &str) -> String {
    let mut queue = String::with_capacity(name.len() + 1);
    for c in name.chars() {
        match c {
            '%' => queue.push_str("%25"),
            '/' => queue.push_str("%2F"),
            c => queue.push(c),
        }
    }
    queue.push('/');
    queue
}

impl EtcdBackend {
    /// The full key of lock `name`'s queue (`<prefix>/<name>/`), and of `token`'s place in it:
    /// `<queue><token>`, `<queue><token>-r` for a reader, or `<queue><token>-p<n>` for a
    /// permit of a semaphore of `n` (a token ends in hex digits, so the mark can never be read
    /// as part of one).
    pub(super) fn key_of(&self, name: &str, token: &str, kind: Kind) -> (Vec<u8>, Vec<u8>) {
        let queue = format!("{}{}", self.prefix, queue_of(name));
        let key = match kind {
            Kind::Exclusive => format!("{queue}{token}"),
            Kind::Shared => format!("{queue}{token}{READER}"),
            Kind::Permits(n) => format!("{queue}{token}-p{n}"),
        };
        (queue.into_bytes(), key.into_bytes())
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
        assert!(!queue_of("a/b").starts_with(&queue_of("a")));
    }
}
