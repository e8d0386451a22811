//! Multi-node URLs (`redlock://`, `redis+cluster://`) split into one `redis://` URL per node.

use std::collections::HashSet;

use crate::backend::url::redact_url;

/// Splits a multi-node URL (`redlock://[user:password@]h1:p1,h2:p2[/db]`, same for
/// `redis+cluster://`) into one `redis://` URL per node; the credentials and database apply to
/// every node. Errors say what is wrong with the URL (password redacted).
pub(crate) fn node_urls(url: &str) -> Result<Vec<String>, String> {
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
            Some(userinfo) => format!("redis://{userinfo}@{host}{path}"),
            None => format!("redis://{host}{path}"),
        });
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn multi_node_urls_split_into_one_url_per_node() {
        assert_eq!(
            super::node_urls("redlock://:pw@a:1,b:2, c:3/2").unwrap(),
            [
                "redis://:pw@a:1/2",
                "redis://:pw@b:2/2",
                "redis://:pw@c:3/2"
            ]
        );
        assert_eq!(
            super::node_urls("redis+cluster://h:7000").unwrap(),
            ["redis://h:7000"]
        );
        let empty = super::node_urls("redlock://:secret@").unwrap_err();
        assert!(
            empty.contains("names no nodes") && !empty.contains("secret"),
            "{empty}"
        );
        assert!(
            super::node_urls("redlock://a:1,,b:2")
                .unwrap_err()
                .contains("empty node")
        );
        assert!(
            super::node_urls("redlock://a:1,a:1")
                .unwrap_err()
                .contains("twice")
        );
    }
}
