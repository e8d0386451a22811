//! `zk://` URLs and the node layout: where a lock's queue lives in the tree, and how a lock
//! name that ZooKeeper paths cannot hold is encoded.

use crate::backend::Kind;
use std::time::Duration;

use crate::error::LockError;

/// The ZooKeeper client port when a host names none.
const DEFAULT_PORT: u16 = 2181;

/// What a `zk://` or `zks://` URL says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ZkUrl {
    /// `zks://`: TLS to the servers' secure client port.
    pub secure: bool,
    /// `user:password@`: ZooKeeper digest authentication, and lock nodes only that identity
    /// may delete.
    pub digest: Option<Digest>,
    /// `host:port,host:port` for the client.
    pub hosts: String,
    /// The chroot every path lives under (`""` for the tree's root), e.g. `/distlock`.
    pub chroot: String,
    /// `session_timeout=`: one session of this timeout for every lock, whatever its lease.
    pub session_timeout: Option<Duration>,
    /// `recipe=`: which of Curator's recipes this client's node names follow.
    pub recipe: Recipe,
}

/// Which Apache Curator recipe a client's lock nodes share a path with (`?recipe=` in the
/// URL). A node name ends in one marker before its sequence number, and Curator sorts each
/// recipe's nodes by what follows that recipe's marker, so one client follows one recipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Recipe {
    /// `InterProcessMutex` (the default): every node ends `-lock-<sequence>`.
    #[default]
    Mutex,
    /// `InterProcessReadWriteLock`: a reader's node ends `__READ__<sequence>`, every other
    /// node (a writer's, a permit's) `__WRIT__<sequence>`.
    ReadWrite,
}

/// `user:password` of ZooKeeper's digest scheme; never shown.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Digest(pub Vec<u8>);

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Digest(***)")
    }
}

/// Parses `zk://[user:password@]h1:2181,h2:2181/optional/chroot?session_timeout=10s` (and
/// `zks://…`, the TLS parameters already taken out).
pub(crate) fn parse_url(url: &str) -> Result<ZkUrl, LockError> {
    let shown = crate::url::redact_url(url);
    let bad = |why: String| LockError::Config(format!("invalid ZooKeeper URL `{shown}`: {why}"));
    let (secure, rest) = match (url.strip_prefix("zk://"), url.strip_prefix("zks://")) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ => {
            return Err(bad(
                "expected `zk://[user:password@]host:port[,host:port…][/chroot]` (or `zks://` \
                 for TLS)"
                    .into(),
            ));
        }
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, chroot) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, ""),
    };
    let (digest, hosts) = match authority.rsplit_once('@') {
        None => (None, authority),
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, password)) if !user.is_empty() && !password.is_empty() => {
                let decode = crate::url::percent_decode;
                let pair = format!("{}:{}", decode(user), decode(password));
                (Some(Digest(pair.into_bytes())), hosts)
            }
            _ => {
                return Err(bad(
                    "ZooKeeper digest authentication needs both a user and a password \
                     (`zk://user:password@host:port`)"
                        .into(),
                ));
            }
        },
    };
    let listed = crate::url::host_list(hosts, DEFAULT_PORT).map_err(bad)?;
    let chroot = match chroot {
        "" | "/" => String::new(),
        chroot => {
            check_chroot(chroot).map_err(|why| bad(format!("bad chroot `{chroot}`: {why}")))?;
            chroot.to_owned()
        }
    };
    let mut session_timeout = None;
    let mut recipe = Recipe::Mutex;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "recipe" => {
                recipe = match value {
                    "mutex" => Recipe::Mutex,
                    "rwlock" => Recipe::ReadWrite,
                    other => {
                        return Err(bad(format!(
                            "`recipe={other}`: expected `mutex` (Curator's InterProcessMutex, \
                             the default) or `rwlock` (its InterProcessReadWriteLock)"
                        )));
                    }
                };
            }
            "session_timeout" => {
                let timeout = parse_duration(value).ok_or_else(|| {
                    bad(format!(
                        "`session_timeout={value}`: expected a duration such as `10s` or `500ms`"
                    ))
                })?;
                if timeout < Duration::from_millis(100) {
                    return Err(bad(format!(
                        "`session_timeout={value}` is too short: at least 100ms"
                    )));
                }
                session_timeout = Some(timeout);
            }
            other => {
                return Err(bad(format!(
                    "unknown parameter `{other}` (supported: `session_timeout`, `recipe`)"
                )));
            }
        }
    }
    Ok(ZkUrl {
        secure,
        digest,
        hosts: listed.join(","),
        chroot,
        session_timeout,
        recipe,
    })
}

use crate::url::parse_duration;

/// A chroot is an absolute path of non-empty components other than `.` and `..`, without
/// a trailing slash or control characters.
fn check_chroot(chroot: &str) -> Result<(), &'static str> {
    let Some(inner) = chroot.strip_prefix('/') else {
        return Err("it must start with `/`");
    };
    for part in inner.split('/') {
        match part {
            "" => return Err("empty path component (`//` or a trailing `/`)"),
            "." | ".." => return Err("`.` and `..` are not allowed in ZooKeeper paths"),
            part if part.chars().any(|c| c.is_control()) => {
                return Err("control characters are not allowed in ZooKeeper paths");
            }
            _ => {}
        }
    }
    Ok(())
}

/// The node under which lock `name`'s queue lives: `/` + the name as one path component.
pub(crate) fn parent_of(name: &str) -> String {
    let mut parent = String::with_capacity(name.len() + 1);
    parent.push('/');
    encode_into(name, &mut parent);
    parent
}

/// Encodes a lock name as one ZooKeeper path component, reversibly: letters, digits and
/// `:._-@+=,~` stay as they are (so `lock:order:42` reads as itself); every other byte — `/`,
/// `%`, spaces, non-ASCII text, characters ZooKeeper refuses — becomes `%XX`. Names ZooKeeper
/// reserves (`.`, `..`, `zookeeper`) are escaped too.
fn encode_into(name: &str, out: &mut String) {
    let start = out.len();
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || b":._-@+=,~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    let encoded = &out[start..];
    if encoded == "." || encoded == ".." || encoded == "zookeeper" {
        let first = char::from(name.as_bytes()[0]);
        out.replace_range(start..start + 1, &format!("%{:02X}", u32::from(first)));
    }
}

/// Decodes a path component made by [`encode_into`] (for people and tools reading the tree).
pub(crate) fn decode(component: &str) -> Option<String> {
    crate::url::unescape(component, b'%')
}

/// What marks a reader's node: `<token>-r-lock-<sequence>`. (A token ends in hex digits, so
/// `<token>-r` is never a token itself.)
const READER: &str = "-r";

/// What every distlock node name ends in before ZooKeeper's sequence number: Apache Curator's
/// `InterProcessMutex` names its nodes `[_c_<uuid>-]lock-<sequence>` and sorts a lock's
/// children by what follows the last `lock-` in each name. Ending every node so — a plain
/// lock's, a reader's and a permit's — puts each at its place in Curator's order, so a Curator
/// mutex on the same path waits for every distlock holder ahead of it (and a distlock reader
/// or permit is never taken for a free lock), and distlock waits for Curator's holders.
const LOCK_NAME: &str = "lock-";

/// The names Curator's `InterProcessReadWriteLock` gives its nodes in place of `lock-`.
const CURATOR_READ: &str = "__READ__";
const CURATOR_WRITE: &str = "__WRIT__";

/// The prefix of a waiter's node name: its owner token (and `-r` for a reader, `-p<n>` for a
/// permit of a semaphore of `n`), then `-lock-` — or, following Curator's read/write lock,
/// `-__READ__` for a reader and `-__WRIT__` for any other; ZooKeeper appends the sequence
/// number.
pub(crate) fn node_prefix(parent: &str, token: &str, kind: Kind, recipe: Recipe) -> String {
    match (recipe, kind) {
        (Recipe::Mutex, Kind::Exclusive) => format!("{parent}/{token}-{LOCK_NAME}"),
        (Recipe::Mutex, Kind::Shared) => format!("{parent}/{token}{READER}-{LOCK_NAME}"),
        (Recipe::Mutex, Kind::Permits(n)) => format!("{parent}/{token}-p{n}-{LOCK_NAME}"),
        (Recipe::ReadWrite, Kind::Exclusive) => format!("{parent}/{token}-{CURATOR_WRITE}"),
        (Recipe::ReadWrite, Kind::Shared) => format!("{parent}/{token}-{CURATOR_READ}"),
        (Recipe::ReadWrite, Kind::Permits(n)) => format!("{parent}/{token}-p{n}-{CURATOR_WRITE}"),
    }
}

/// A queue node's name without its sequence number, and that number: ZooKeeper's ten (or
/// more) digits after a `-` or, in Curator's read/write nodes, a `_`.
fn split_sequence(child: &str) -> Option<(&str, i64)> {
    let digits = child.bytes().rev().take_while(u8::is_ascii_digit).count();
    let (head, sequence) = child.split_at(child.len() - digits);
    let separated = head.ends_with('-') || head.ends_with('_');
    if digits < 10 || !separated {
        return None;
    }
    Some((head, sequence.parse().ok()?))
}

/// The kind of hold a queue node asks for (see [`node_prefix`]), and its owner token: the name
/// without the kind's mark, `-lock-` and the sequence number. Curator's nodes read as the
/// lock they are: `[_c_<uuid>-]lock-N` and `…__WRIT__N` exclusive, `…__READ__N` a reader
/// (their token is Curator's protection prefix, or empty). A node of the layout before
/// `-lock-` (`<token>[-r|-p<n>]-N`) reads as it did.
pub(crate) fn parse_node(child: &str) -> (Kind, &str) {
    let head = split_sequence(child).map_or(child, |(head, _)| head);
    let marked = if let Some(base) = head.strip_suffix(CURATOR_READ) {
        return (Kind::Shared, base.strip_suffix('-').unwrap_or(base));
    } else if let Some(base) = head
        .strip_suffix(LOCK_NAME)
        .or_else(|| head.strip_suffix(CURATOR_WRITE))
    {
        base.strip_suffix('-').unwrap_or(base)
    } else {
        head.strip_suffix('-').unwrap_or(head)
    };
    if let Some(token) = marked.strip_suffix(READER) {
        return (Kind::Shared, token);
    }
    if let Some((token, mark)) = marked.rsplit_once("-p")
        && let Ok(n) = mark.parse::<u16>()
        && !mark.starts_with('+')
    {
        return (Kind::Permits(n), token);
    }
    (Kind::Exclusive, marked)
}

/// A queue node as the rules of upgradable reads see it: its kind, and whether it is an
/// upgradable share (a reader's node with an upgradable token).
pub(crate) fn entry_of(child: &str) -> crate::backend::queue::Entry {
    let (kind, token) = parse_node(child);
    crate::backend::queue::Entry {
        kind,
        upgradable: kind == Kind::Shared && crate::token::is_upgradable(token),
    }
}

/// Whether a queue node is a reader's (see [`node_prefix`]).
pub(crate) fn is_reader(child: &str) -> bool {
    parse_node(child).0 == Kind::Shared
}

/// The sequence number at the end of a queue node's name (`<token>-lock-0000000042`, or any
/// Curator lock node's), if it has one.
pub(crate) fn sequence_of(child: &str) -> Option<i64> {
    split_sequence(child).map(|(_, sequence)| sequence)
}

/// The owner token in a queue node's name.
pub(crate) fn token_of(child: &str) -> &str {
    parse_node(child).1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_hosts_chroot_and_session_timeout() {
        let url = parse_url("zk://a:1,b,[::1]:3/app/locks?session_timeout=10s").unwrap();
        assert_eq!(url.hosts, "a:1,b:2181,[::1]:3");
        assert_eq!(url.chroot, "/app/locks");
        assert_eq!(url.session_timeout, Some(Duration::from_secs(10)));
        let url = parse_url("zk://127.0.0.1:2181/").unwrap();
        assert_eq!((url.chroot.as_str(), url.session_timeout), ("", None));
        assert_eq!(url.recipe, Recipe::Mutex);
        let url = parse_url("zk://a/x?recipe=rwlock&session_timeout=5s").unwrap();
        assert_eq!(url.recipe, Recipe::ReadWrite);
        let url = parse_url("zk://a/x?recipe=mutex").unwrap();
        assert_eq!(url.recipe, Recipe::Mutex);
        for (bad, says) in [
            ("zk://", "host is missing"),
            ("zk://a:x", "not a port"),
            ("zk://a/b//c", "empty path component"),
            ("zk://a/b/", "empty path component"),
            ("zk://a/b/../c", "`.` and `..`"),
            ("zk://a?session_timeout=ten", "expected a duration"),
            ("zk://a?session_timeout=10ms", "too short"),
            ("zk://a?recipe=rw", "expected `mutex`"),
            (
                "zk://a?sessiontimeout=1s",
                "unknown parameter `sessiontimeout`",
            ),
            ("http://a", "expected `zk://"),
        ] {
            let err = parse_url(bad).unwrap_err().to_string();
            assert!(err.contains(says) && err.contains(bad), "{bad}: {err}");
        }
        let err = parse_url("zk://u@a").unwrap_err().to_string();
        assert!(err.contains("both a user and a password"), "{err}");
        let url = parse_url("zks://app:s%40cret@a:2281/x").unwrap();
        assert!(url.secure);
        assert_eq!(url.digest, Some(Digest(b"app:s@cret".to_vec())));
        assert_eq!(url.hosts, "a:2281");
        assert!(!format!("{url:?}").contains("cret"));
        let err = parse_url("zk://app:secret@a:x").unwrap_err().to_string();
        assert!(!err.contains("secret"), "{err}");
    }

    #[test]
    fn names_become_one_reversible_path_component() {
        for name in [
            "lock:order:42",
            "lock:/orders/42/..",
            "ünïcødé/κλειδί:🔒",
            "with space %s \\ \" '",
            ".",
            "..",
            "zookeeper",
            "{user}:1",
        ] {
            let parent = parent_of(name);
            let component = &parent[1..];
            assert!(!component.contains('/'), "{name}: {component}");
            assert!(!matches!(component, "." | ".." | "zookeeper"), "{name}");
            assert!(component.is_ascii(), "{name}: {component}");
            assert_eq!(decode(component).as_deref(), Some(name));
        }
        assert_eq!(parent_of("lock:order:42"), "/lock:order:42");
    }

    #[test]
    fn queue_nodes_carry_token_and_sequence() {
        let mutex = Recipe::Mutex;
        assert_eq!(
            node_prefix("/p", "h:1:2:0123abcd", Kind::Exclusive, mutex),
            "/p/h:1:2:0123abcd-lock-"
        );
        assert_eq!(node_prefix("/p", "t", Kind::Shared, mutex), "/p/t-r-lock-");
        assert_eq!(
            node_prefix("/p", "t", Kind::Permits(4), mutex),
            "/p/t-p4-lock-"
        );
        let rw = Recipe::ReadWrite;
        assert_eq!(node_prefix("/p", "t", Kind::Exclusive, rw), "/p/t-__WRIT__");
        assert_eq!(node_prefix("/p", "t", Kind::Shared, rw), "/p/t-__READ__");
        assert_eq!(
            node_prefix("/p", "t", Kind::Permits(4), rw),
            "/p/t-p4-__WRIT__"
        );
        for (node, kind, token, sequence) in [
            (
                "h:1:2:0123abcd-lock-0000000042",
                Kind::Exclusive,
                "h:1:2:0123abcd",
                42,
            ),
            (
                "h:1:2:0123abcd-r-lock-0000000042",
                Kind::Shared,
                "h:1:2:0123abcd",
                42,
            ),
            (
                "h:1:2:0123abcd-p4-lock-0000000042",
                Kind::Permits(4),
                "h:1:2:0123abcd",
                42,
            ),
            // Curator's InterProcessMutex, protected or not, and its read/write lock.
            (
                "_c_399c43c8-382f-4ef7-8982-f5a5e153b8e7-lock-0000000007",
                Kind::Exclusive,
                "_c_399c43c8-382f-4ef7-8982-f5a5e153b8e7",
                7,
            ),
            ("lock-0000000003", Kind::Exclusive, "", 3),
            ("_c_u-__READ__0000000001", Kind::Shared, "_c_u", 1),
            ("_c_u-__WRIT__0000000002", Kind::Exclusive, "_c_u", 2),
            ("t-p4-__WRIT__0000000002", Kind::Permits(4), "t", 2),
            // The layout before `-lock-`.
            ("0123abcd-0000000042", Kind::Exclusive, "0123abcd", 42),
            (
                "h:1:2:0123abcd-r-0000000042",
                Kind::Shared,
                "h:1:2:0123abcd",
                42,
            ),
            (
                "h:1:2:0123abcd-p4-0000000042",
                Kind::Permits(4),
                "h:1:2:0123abcd",
                42,
            ),
            // An election candidate's token.
            (
                "=host-a%3A1:7:8:0123abcd-lock-0000000009",
                Kind::Exclusive,
                "=host-a%3A1:7:8:0123abcd",
                9,
            ),
        ] {
            assert_eq!(parse_node(node), (kind, token), "{node}");
            assert_eq!(sequence_of(node), Some(sequence), "{node}");
        }
        assert_eq!(sequence_of("intruder-0000000007"), Some(7));
        for foreign in ["foreign", "x-12", "leases", "locks", "abc12345678901"] {
            assert_eq!(sequence_of(foreign), None, "{foreign}");
        }
    }
}
