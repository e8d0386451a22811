//! Owner tokens: the value that proves who holds a lock, and says who that is.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// An owner token: `<host>:<pid>:<unix ms>:<32 hex digits>`, e.g.
/// `web-3:4242:1763900000123:9f86d081884c7d659a2feaa0c55ad015`.
///
/// The last part is a fresh 128-bit value: release and renewal compare the whole token
/// atomically, so only the owner that acquired a lock can give it back or extend it. The parts
/// before it name the process and when its acquisition began, so `distlock list` can say who
/// holds a lock without a second write on the hot path (the Redis value stays one plain string,
/// the layout other clients use; their random values show as "holder unknown").
///
/// Each thread keys a SipHash (a pseudo-random function) with 128 bits from the operating
/// system's CSPRNG once, then hashes a per-thread counter: tokens never repeat, and cannot be
/// predicted without the keys — without a system call per acquisition.
///
/// Kept inline (no allocation per acquisition): the longest token is 64 + 1 + 10 + 1 + 20 + 1 +
/// 32 bytes.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct OwnerToken {
    bytes: [u8; TOKEN_CAPACITY],
    len: u8,
}

const TOKEN_CAPACITY: usize = 1 + MAX_HOST_LEN + 1 + 10 + 1 + 20 + 1 + 32;

/// The first character of an upgradable reader's token (`LockRequest::upgradable`): the store
/// tells the one upgradable share of a key from its plain readers' by it. No host name starts
/// with it (host names are cut to letters, digits, `.`, `-` and `_`).
pub(crate) const UPGRADABLE: char = '^';

/// The owner token of the writer's entry an upgrade of the upgradable share `token` adds to a
/// lock's queue (ZooKeeper, etcd): `!` before the share's token.
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
pub(crate) fn upgrade_entry(token: &str) -> String {
    format!("!{token}")
}

/// Whether `token` is an upgradable reader's.
pub(crate) fn is_upgradable(token: &str) -> bool {
    token.starts_with(UPGRADABLE)
}

/// The longest host name kept in a token (longer ones are cut).
const MAX_HOST_LEN: usize = 64;

/// `<host>:<pid>:`, formatted once per process. Host names are cut to letters, digits, `.`,
/// `-` and `_` (a token is also a ZooKeeper node name and part of an etcd key).
fn process_prefix() -> &'static str {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PREFIX.get_or_init(|| {
        let host: String = host_name()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
            .take(MAX_HOST_LEN)
            .collect();
        let host = if host.is_empty() {
            "unknown-host".to_owned()
        } else {
            host
        };
        format!("{host}:{}:", std::process::id())
    })
}

/// This machine's name, from the kernel (Linux) or `HOSTNAME`.
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned())
}

tokio::task_local! {
    /// An election candidate's `=<identity>:<pid>:`, in place of the process's prefix, for the
    /// tokens its campaign generates (see [`with_identity`]).
    static IDENTITY: Box<str>;
}

/// The longest identity of an election candidate, as kept in its tokens (each byte other than
/// a letter, digit, `.`, `-` or `_` takes three: `%3A` for `:`).
pub(crate) const MAX_IDENTITY_LEN: usize = MAX_HOST_LEN - 1;

/// `identity` as stored in a token: `=` and the identity, percent-encoded to the characters a
/// host name may have; `None` if that is longer than [`MAX_IDENTITY_LEN`] + 1 bytes.
pub(crate) fn encode_identity(identity: &str) -> Option<String> {
    let mut out = String::from("=");
    for byte in identity.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'-' | b'_') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    (out.len() <= MAX_IDENTITY_LEN + 1).then_some(out)
}

/// Runs `future` with every token it generates naming `encoded` ([`encode_identity`]) instead
/// of this host: an election candidate's acquisitions.
pub(crate) async fn with_identity<F: std::future::Future>(encoded: String, future: F) -> F::Output {
    let prefix = format!("{encoded}:{}:", std::process::id()).into_boxed_str();
    IDENTITY.scope(prefix, future).await
}

impl OwnerToken {
    pub(crate) fn generate() -> OwnerToken {
        use std::cell::Cell;
        use std::hash::{BuildHasher, Hasher};
        thread_local! {
            static KEYS: (std::hash::RandomState, std::hash::RandomState, Cell<u64>) = {
                // std's RandomState keys come from the OS RNG; mix in getrandom too, so
                // two threads never share keys even if std reuses per-thread seeds.
                let mut salt = [0u8; 16];
                if getrandom::fill(&mut salt).is_err() {
                    fastrand::Rng::new().fill(&mut salt);
                }
                (std::hash::RandomState::new(), std::hash::RandomState::new(), Cell::new(u64::from_le_bytes(salt[..8].try_into().unwrap_or_default()) ^ u64::from_le_bytes(salt[8..].try_into().unwrap_or_default())))
            };
        }
        let (high, low) = KEYS.with(|(a, b, counter)| {
            let n = counter.get().wrapping_add(1);
            counter.set(n);
            let mut h = a.build_hasher();
            h.write_u64(n);
            let mut l = b.build_hasher();
            l.write_u64(n);
            (h.finish(), l.finish())
        });
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&high.to_be_bytes());
        bytes[8..].copy_from_slice(&low.to_be_bytes());
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut token = OwnerToken {
            bytes: [0; TOKEN_CAPACITY],
            len: 0,
        };
        let copy = |token: &mut OwnerToken, prefix: &[u8]| {
            token.bytes[..prefix.len()].copy_from_slice(prefix);
            prefix.len()
        };
        let mut at = IDENTITY
            .try_with(|prefix| copy(&mut token, prefix.as_bytes()))
            .unwrap_or_else(|_| copy(&mut token, process_prefix().as_bytes()));
        // The milliseconds in decimal, without the formatting machinery.
        let mut digits = [0u8; 20];
        let mut n = now;
        let mut count = 0;
        loop {
            digits[19 - count] = b'0' + (n % 10) as u8;
            count += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        token.bytes[at..at + count].copy_from_slice(&digits[20 - count..]);
        at += count;
        token.bytes[at] = b':';
        at += 1;
        for byte in bytes {
            token.bytes[at] = HEX[usize::from(byte >> 4)];
            token.bytes[at + 1] = HEX[usize::from(byte & 0xf)];
            at += 2;
        }
        token.len = at as u8;
        token
    }

    /// A token for an upgradable read ([`UPGRADABLE`], then a fresh token).
    pub(crate) fn generate_upgradable() -> OwnerToken {
        let plain = OwnerToken::generate();
        let mut token = OwnerToken {
            bytes: [0; TOKEN_CAPACITY],
            len: plain.len + 1,
        };
        token.bytes[0] = UPGRADABLE as u8;
        token.bytes[1..=usize::from(plain.len)]
            .copy_from_slice(&plain.bytes[..usize::from(plain.len)]);
        token
    }

    /// A fresh token of the same kind as this one (upgradable or not), for another attempt.
    pub(crate) fn another(&self) -> OwnerToken {
        if is_upgradable(self.as_str()) {
            OwnerToken::generate_upgradable()
        } else {
            OwnerToken::generate()
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        // Only ASCII is ever stored: the host is filtered, the rest are digits, `:` and hex.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

/// Who holds a lock, read from its owner token.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The holder's host name (as its kernel reports it, cut to 64 characters).
    pub host: String,
    /// The holder's process id on that host.
    pub pid: u32,
    /// When the holder's acquisition began, by its wall clock (a holder that waited got the
    /// lock later).
    pub since: SystemTime,
    /// An election's leader: the identity it campaigned with
    /// ([`Election::campaign`](crate::Election::campaign)), which its token carries instead of
    /// the host name (`host` is then empty).
    pub identity: Option<String>,
}

impl Holder {
    /// Reads the holder from an owner token distlock wrote
    /// (`<host>:<pid>:<unix ms>:<32 hex digits>`); `None` for any other value (another
    /// client's lock).
    pub fn from_token(token: &str) -> Option<Holder> {
        let token = token.strip_prefix(UPGRADABLE).unwrap_or(token);
        let mut parts = token.rsplitn(4, ':');
        let random = parts.next()?;
        let millis: u64 = parts.next()?.parse().ok()?;
        let pid: u32 = parts.next()?.parse().ok()?;
        let host = parts.next()?;
        let valid = random.len() == 32
            && random.bytes().all(|b| b.is_ascii_hexdigit())
            && !host.is_empty()
            && !host.contains(':');
        if !valid {
            return None;
        }
        let since = UNIX_EPOCH + Duration::from_millis(millis);
        if let Some(encoded) = host.strip_prefix('=') {
            let identity = crate::url::percent_decode(encoded);
            return Some(Holder {
                host: String::new(),
                pid,
                since,
                identity: Some(identity),
            });
        }
        Some(Holder {
            host: host.to_owned(),
            pid,
            since,
            identity: None,
        })
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.identity {
            Some(identity) => write!(f, "leader `{identity}` (pid {})", self.pid),
            None => write!(f, "{} pid {}", self.host, self.pid),
        }
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Who, and a prefix of the random part only: enough to correlate logs, not enough
        // to forge a release.
        let token = self.as_str();
        let shown = token.len().saturating_sub(24);
        write!(f, "OwnerToken({}…)", &token[..shown])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_name_the_process_and_end_in_128_random_bits() {
        let a = OwnerToken::generate();
        let b = OwnerToken::generate();
        let random = a.as_str().rsplit(':').next().unwrap();
        assert_eq!(random.len(), 32, "{a:?}");
        assert!(random.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        let holder = Holder::from_token(a.as_str()).expect("a token of ours names its holder");
        assert_eq!(holder.pid, std::process::id());
        let age = SystemTime::now().duration_since(holder.since).unwrap();
        assert!(age < Duration::from_secs(60), "{age:?}");
        assert!(
            !format!("{a:?}").contains(&random[8..]),
            "Debug shows the secret: {a:?}"
        );
    }

    #[test]
    fn foreign_values_name_no_holder() {
        for value in [
            "9f86d081884c7d659a2feaa0c55ad015",
            "a1b2c3",
            "host:12:34:not-hex-not-hex-not-hex-not-hex-",
            ":12:34:9f86d081884c7d659a2feaa0c55ad015",
            "h:x:34:9f86d081884c7d659a2feaa0c55ad015",
            "",
        ] {
            assert_eq!(Holder::from_token(value), None, "{value:?}");
        }
        let h = Holder::from_token("web-3:4242:1000:9f86d081884c7d659a2feaa0c55ad015").unwrap();
        assert_eq!((h.host.as_str(), h.pid), ("web-3", 4242));
        assert_eq!(h.since, UNIX_EPOCH + Duration::from_secs(1));
    }

    #[tokio::test]
    async fn a_candidates_tokens_carry_its_identity() {
        let encoded = encode_identity("host-a:4242/ü").unwrap();
        assert_eq!(encoded, "=host-a%3A4242%2F%C3%BC");
        let token = with_identity(encoded, async { OwnerToken::generate() }).await;
        let holder = Holder::from_token(token.as_str()).expect("an election token");
        assert_eq!(holder.identity.as_deref(), Some("host-a:4242/ü"));
        assert_eq!(holder.pid, std::process::id());
        assert!(!token.as_str().contains('/'), "{token:?}");
        // Outside the scope, the host again.
        let plain = Holder::from_token(OwnerToken::generate().as_str()).unwrap();
        assert_eq!(plain.identity, None);
        assert!(encode_identity(&"x".repeat(MAX_IDENTITY_LEN)).is_some());
        assert!(encode_identity(&"x".repeat(MAX_IDENTITY_LEN + 1)).is_none());
        assert!(encode_identity(&":".repeat(22)).is_none());
    }

    #[test]
    fn upgradable_tokens_are_marked_and_read_like_any_other() {
        let token = OwnerToken::generate_upgradable();
        assert!(is_upgradable(token.as_str()), "{token:?}");
        assert!(!is_upgradable(OwnerToken::generate().as_str()));
        assert!(is_upgradable(token.another().as_str()));
        assert_ne!(token.another(), token);
        let holder = Holder::from_token(token.as_str()).expect("a holder");
        assert_eq!(holder.pid, std::process::id());
        assert!(!holder.host.starts_with(UPGRADABLE));
    }

    #[test]
    fn tokens_do_not_repeat_across_threads_or_calls() {
        let mut all = std::collections::HashSet::new();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    (0..10_000)
                        .map(|_| OwnerToken::generate().as_str().to_owned())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for thread in threads {
            for token in thread.join().unwrap() {
                assert!(all.insert(token), "a token repeated");
            }
        }
    }
}
