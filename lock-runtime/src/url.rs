//! URLs in messages: passwords never reach an error or a log line.

use std::time::Duration;

/// The URL with any password replaced by `***`, for messages and logs.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return format!("{scheme}://{authority}{}", redact_query(path));
    };
    let userinfo = match userinfo.split_once(':') {
        Some((user, _password)) => format!("{user}:***"),
        None => "***".to_owned(),
    };
    format!("{scheme}://{userinfo}@{host}{}", redact_query(path))
}

/// `path` with the URLs in its query's values (PostgreSQL's `listen_url=`) redacted too.
fn redact_query(path: &str) -> String {
    let Some((path, query)) = path.split_once('?') else {
        return path.to_owned();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) if percent_decode(value).contains("://") => {
                format!("{name}={}", redact_url(&percent_decode(value)))
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{path}?{}", pairs.join("&"))
}

/// `host[:port],host[:port]…` (IPv6 in brackets) as `host:port` each, `default_port` where a
/// host names none; the error says which host is wrong and how.
#[cfg(any(
    feature = "redis",
    feature = "zookeeper",
    feature = "etcd",
    feature = "nats"
))]
pub(crate) fn host_list(hosts: &str, default_port: u16) -> Result<Vec<String>, String> {
    let mut listed = Vec::new();
    for host in hosts.split(',') {
        let host = host.trim();
        if host.is_empty() {
            return Err("a host is missing (expected `host:port[,host:port…]`)".into());
        }
        // `[v6]` or `[v6]:port` keep their brackets; otherwise the last `:` starts the port.
        let (name, port) = match host.strip_prefix('[') {
            Some(rest) => match rest.split_once(']') {
                Some((_, "")) => (host, None),
                Some((v6, port)) => match port.strip_prefix(':') {
                    Some(port) => (&host[..v6.len() + 2], Some(port)),
                    None => return Err(format!("`{host}`: expected `:port` after `]`")),
                },
                None => return Err(format!("`{host}`: `[` without its `]`")),
            },
            None => match host.rsplit_once(':') {
                Some((name, port)) => (name, Some(port)),
                None => (host, None),
            },
        };
        let port: u16 = match port {
            None => default_port,
            Some(port) => port
                .parse()
                .map_err(|_| format!("`{port}` in `{host}` is not a port number"))?,
        };
        if name.is_empty() || name == "[]" {
            return Err(format!("`{host}` names no host"));
        }
        listed.push(format!("{name}:{port}"));
    }
    Ok(listed)
}

/// A duration as URLs write it: `10s`, `500ms`, `2m`, `1h`.
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(number)),
        "s" => Some(Duration::from_secs(number)),
        "m" => number.checked_mul(60).map(Duration::from_secs),
        "h" => number.checked_mul(3600).map(Duration::from_secs),
        _ => None,
    }
}

/// `url` without the query parameters `take(name, value)` accepts (it keeps what it needs);
/// the other parameters and the fragment stay as they were.
pub(crate) fn take_query(url: &str, mut take: impl FnMut(&str, &str) -> bool) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let (query, fragment) = match query.split_once('#') {
        Some((query, fragment)) => (query, Some(fragment)),
        None => (query, None),
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            !pair.is_empty() && !take(name, value)
        })
        .collect();
    let mut rest = base.to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    if let Some(fragment) = fragment {
        rest.push('#');
        rest.push_str(fragment);
    }
    rest
}

/// `%XX` escapes decoded (a malformed one is kept as written); the result as text, invalid
/// UTF-8 replaced.
#[cfg_attr(not(network_store), allow(dead_code))]
/// `text` with every `<escape>XX` (two hex digits) turned back into its byte; `None` for an
/// escape not followed by two hex digits, or bytes that are not UTF-8. (A ZooKeeper path
/// component escapes with `%`, a NATS key with `=`.)
#[cfg(any(feature = "zookeeper", feature = "nats"))]
pub(crate) fn unescape(text: &str, escape: u8) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == escape {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `url` with `password` as the password of its user info (percent-encoded), replacing any
/// the URL has: a password given in code, kept out of the URL people see.
pub(crate) fn with_password(url: &str, password: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let (user, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (
            userinfo.split_once(':').map_or(userinfo, |(user, _)| user),
            hosts,
        ),
        None => ("", authority),
    };
    let mut encoded = String::with_capacity(password.len());
    for byte in password.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    format!("{scheme}://{user}:{encoded}@{hosts}{path}")
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact_url("redis://:hunter2@127.0.0.1:6379/0"),
            "redis://:***@127.0.0.1:6379/0"
        );
        assert_eq!(
            redact_url("rediss://app:s3cr@t@h:1"),
            "rediss://app:***@h:1"
        );
        assert_eq!(
            redact_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        assert_eq!(redact_url("redis://tok@h"), "redis://***@h");
    }

    #[test]
    fn queries_lose_what_is_taken_and_passwords_are_spliced_in() {
        use super::{percent_decode, take_query, with_password};
        assert_eq!(
            take_query("s://h/p?a=1&b=2&c#f", |name, _| name == "b"),
            "s://h/p?a=1&c#f"
        );
        assert_eq!(take_query("s://h?b=2", |name, _| name == "b"), "s://h");
        assert_eq!(percent_decode("a%20b%2Fc%zz%4"), "a b/c%zz%4");
        assert_eq!(
            super::redact_url(
                "postgres://u:secret@pooler:6432/db?pooler=transaction&listen_url=postgres%3A%2F%2Fu%3Asecret%40db%3A5432%2Fdb"
            ),
            "postgres://u:***@pooler:6432/db?pooler=transaction&listen_url=postgres://u:***@db:5432/db"
        );
        assert_eq!(
            super::redact_url("postgres://pooler?listen_url=postgres://u:secret@db/x"),
            "postgres://pooler?listen_url=postgres://u:***@db/x"
        );
        assert_eq!(
            with_password("redis://u:old@h:1/0?x=1", "p@ss:/w"),
            "redis://u:p%40ss%3A%2Fw@h:1/0?x=1"
        );
        assert_eq!(with_password("etcd://h:1,h:2", "pw"), "etcd://:pw@h:1,h:2");
        assert_eq!(with_password("zk://app@h/x", "pw"), "zk://app:pw@h/x");
    }

    #[cfg(any(
        feature = "redis",
        feature = "zookeeper",
        feature = "etcd",
        feature = "nats"
    ))]
    #[test]
    fn host_lists_get_default_ports_and_name_what_is_wrong() {
        use super::host_list;
        assert_eq!(
            host_list("a:1, b ,[::1]:3,[::1]", 9).unwrap(),
            ["a:1", "b:9", "[::1]:3", "[::1]:9"]
        );
        assert!(
            host_list("a:1,,b", 9)
                .unwrap_err()
                .contains("a host is missing")
        );
        assert!(
            host_list("a:x", 9)
                .unwrap_err()
                .contains("`x` in `a:x` is not a port")
        );
        assert!(
            host_list(":5", 9)
                .unwrap_err()
                .contains("`:5` names no host")
        );
        assert!(
            host_list("[::1", 9)
                .unwrap_err()
                .contains("without its `]`")
        );
        assert!(
            host_list("[::1]x", 9)
                .unwrap_err()
                .contains("expected `:port`")
        );
    }
}
