//! Multi-node URLs (`redlock://`, `redis+cluster://`) split into one `redis://` URL per node.

use std::collections::HashSet;

use crate::url::redact_url;

/// Splits a multi-node URL (`redlock://[user:password@]h1:p1,h2:p2[/db]`, same for
/// `redis+cluster://`) into one `redis://` URL per node (`rediss://` when `tls`); the
/// credentials and database apply to every node. Errors say what is wrong with the URL
/// (password redacted).
pub(crate) fn node_urls(url: &str, tls: bool) -> Result<Vec<String>, String> {
    let node_scheme = if tls { "rediss" } else { "redis" };
    let shown = redact_url(url);
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    if hosts.trim().is_empty() {
        return Err(format!(
            "`{shown}` names no nodes: write them comma-separated, e.g. \
             `{scheme}://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002`"
        ));
    }
    let mut nodes: Vec<String> = Vec::new();
    let mut seen = HashSet::new();
    for host in hosts.split(',') {
        let host = host.trim();
        if host.is_empty() {
            return Err(format!("`{shown}` has an empty node between commas"));
        }
        if !seen.insert(host) {
            return Err(format!(
                "`{shown}` names the node `{host}` twice; every node must be a different server"
            ));
        }
        nodes.push(match userinfo {
            Some(userinfo) => format!("{node_scheme}://{userinfo}@{host}{path}"),
            None => format!("{node_scheme}://{host}{path}"),
        });
    }
    Ok(nodes)
}

/// Takes the `replicas=N` option out of `url`'s query (what is left goes to redis-rs, which
/// does not know it): the URL without it, and N (0 without the option). The error says what is
/// wrong with the value.
pub(crate) fn take_replicas(url: &str) -> Result<(String, u16), String> {
    let mut replicas = Ok(0);
    let rest = crate::url::take_query(url, |name, value| {
        if name != "replicas" {
            return false;
        }
        replicas = value
            .parse::<u16>()
            .ok()
            .filter(|&n| n <= 32)
            .ok_or_else(|| {
                format!(
                    "`replicas={value}` in `{}`: expected how many replicas must acknowledge a \
                 grant, 0 to 32",
                    redact_url(url)
                )
            });
        true
    });
    Ok((rest, replicas?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_replicas_option_is_taken_out_of_the_query() {
        use super::take_replicas;
        assert_eq!(
            take_replicas("redis://h:1/0?replicas=2").unwrap(),
            ("redis://h:1/0".to_owned(), 2)
        );
        assert_eq!(
            take_replicas("redis+sentinel://a,b/m?sentinel_password=x&replicas=1").unwrap(),
            ("redis+sentinel://a,b/m?sentinel_password=x".to_owned(), 1)
        );
        assert_eq!(
            take_replicas("rediss://h/?replicas=1#insecure").unwrap(),
            ("rediss://h/#insecure".to_owned(), 1)
        );
        assert_eq!(
            take_replicas("redis://h").unwrap(),
            ("redis://h".to_owned(), 0)
        );
        for bad in [
            "redis://:pw@h?replicas=x",
            "redis://h?replicas=-1",
            "redis://h?replicas=99",
        ] {
            let error = take_replicas(bad).unwrap_err();
            assert!(
                error.contains("0 to 32") && !error.contains("pw@"),
                "{error}"
            );
        }
    }

    #[test]
    fn multi_node_urls_split_into_one_url_per_node() {
        assert_eq!(
            super::node_urls("redlock://:pw@a:1,b:2, c:3/2", false).unwrap(),
            [
                "redis://:pw@a:1/2",
                "redis://:pw@b:2/2",
                "redis://:pw@c:3/2"
            ]
        );
        assert_eq!(
            super::node_urls("redis+cluster://h:7000", false).unwrap(),
            ["redis://h:7000"]
        );
        assert_eq!(
            super::node_urls("redlocks://u:p@a:1,b:2", true).unwrap(),
            ["rediss://u:p@a:1", "rediss://u:p@b:2"]
        );
        let empty = super::node_urls("redlock://:secret@", false).unwrap_err();
        assert!(
            empty.contains("names no nodes") && !empty.contains("secret"),
            "{empty}"
        );
        assert!(
            super::node_urls("redlock://a:1,,b:2", false)
                .unwrap_err()
                .contains("empty node")
        );
        assert!(
            super::node_urls("redlock://a:1,a:1", false)
                .unwrap_err()
                .contains("twice")
        );
    }
}
