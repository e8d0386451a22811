//! URLs in messages: passwords never reach an error or a log line.

/// The URL with any password replaced by `***`, for messages and logs.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    let userinfo = match userinfo.split_once(':') {
        Some((user, _password)) => format!("{user}:***"),
        None => "***".to_owned(),
    };
    format!("{scheme}://{userinfo}@{host}{path}")
}

/// `host[:port],host[:port]…` (IPv6 in brackets) as `host:port` each, `default_port` where a
/// host names none; the error says which host is wrong and how.
#[cfg(any(feature = "redis", feature = "zookeeper", feature = "etcd"))]
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

    #[cfg(any(feature = "redis", feature = "zookeeper", feature = "etcd"))]
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
