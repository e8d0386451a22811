//! What [`LockClient::check`](crate::LockClient::check) reports of etcd beyond the lock it
//! takes: who the client is, whether its roles let it read and write every key under the
//! prefix, and why no clock is compared.

use super::EtcdBackend;
use super::proto::{self, PERM_READ, PERM_READWRITE, PERM_WRITE, Permission, path};
use crate::admin::{Finding, identity_as, identity_finding};

impl EtcdBackend {
    pub(super) async fn diagnose_server(&self) -> Vec<Finding> {
        let user = self.access.credentials.as_ref().map(|c| c.name.clone());
        let tls = self.access.tls.is_some().then_some("");
        let mut findings = vec![match &user {
            Some(user) => identity_finding(Some(user), tls),
            // etcd refuses every call without a user once its authentication is on.
            None => identity_as(
                "as no user (the URL names none: the server's authentication is off)",
                tls,
            ),
        }];
        if let Some(user) = user {
            findings.push(self.role(&user).await);
        }
        findings.push(Finding::pass(
            "clock",
            "not compared: etcd ends a lease by its own elapsed time, never by a clock this \
             host's is read against",
        ));
        findings
    }

    /// Whether the roles of `user` grant read and write over the prefix's key range.
    async fn role(&self, user: &str) -> Finding {
        let start = self.prefix.as_bytes();
        let end = proto::prefix_end(start);
        let prefix = &self.prefix;
        let fix = format!(
            "give `{user}` a role with readwrite on the prefix: `etcdctl role add locks; etcdctl \
             role grant-permission locks readwrite --prefix=true {prefix}; etcdctl user \
             grant-role {user} locks` (as root)"
        );
        let roles: proto::AuthUserGetResponse = match self
            .call(
                "user get",
                self.rpc.unary(
                    path::USER_GET,
                    proto::AuthUserGetRequest {
                        name: user.to_owned(),
                    },
                ),
            )
            .await
        {
            Ok(roles) => roles,
            Err(failure) => {
                let error = self.failed("user get", failure);
                return Finding::fail(
                    "role",
                    format!("cannot read the roles of `{user}`: {error}"),
                    fix,
                );
            }
        };
        let (mut read, mut write) = (false, false);
        let mut seen = Vec::new();
        for role in &roles.roles {
            if role == "root" {
                return Finding::pass(
                    "role",
                    format!("`{user}` has the role `root`: every key, `{prefix}` too"),
                );
            }
            let perms: proto::AuthRoleGetResponse = match self
                .call(
                    "role get",
                    self.rpc.unary(
                        path::ROLE_GET,
                        proto::AuthRoleGetRequest { role: role.clone() },
                    ),
                )
                .await
            {
                Ok(perms) => perms,
                Err(failure) => {
                    seen.push(format!(
                        "{role}: unreadable ({})",
                        self.failed("role get", failure)
                    ));
                    continue;
                }
            };
            for perm in perms.perm.iter().filter(|perm| covers(perm, start, &end)) {
                read |= matches!(perm.perm_type, PERM_READ | PERM_READWRITE);
                write |= matches!(perm.perm_type, PERM_WRITE | PERM_READWRITE);
            }
            seen.push(format!(
                "{role}: {}",
                perms.perm.iter().map(shown).collect::<Vec<_>>().join(", ")
            ));
        }
        let roles_shown = if seen.is_empty() {
            "no role".to_owned()
        } else {
            seen.join("; ")
        };
        match (read, write) {
            (true, true) => Finding::pass(
                "role",
                format!("`{user}` may read and write every key under `{prefix}` ({roles_shown})"),
            ),
            _ => Finding::fail(
                "role",
                format!(
                    "`{user}` may not {} every key under `{prefix}` ({roles_shown})",
                    match (read, write) {
                        (true, false) => "write",
                        (false, true) => "read",
                        _ => "read or write",
                    }
                ),
                fix,
            ),
        }
    }
}

/// Whether `perm` covers every key from `start` up to (not including) `end`.
fn covers(perm: &Permission, start: &[u8], end: &[u8]) -> bool {
    if perm.key.as_slice() > start {
        return false;
    }
    match perm.range_end.as_slice() {
        // One key: covers the range only if the range is that key alone.
        [] => false,
        // Every key from `key` on.
        [0] => true,
        range_end => end != [0] && range_end >= end,
    }
}

/// A permission as `etcdctl role get` shows it.
fn shown(perm: &Permission) -> String {
    let kind = match perm.perm_type {
        PERM_READ => "read",
        PERM_WRITE => "write",
        _ => "readwrite",
    };
    let key = String::from_utf8_lossy(&perm.key);
    match perm.range_end.as_slice() {
        [] => format!("{kind} `{key}`"),
        [0] => format!("{kind} `{key}`.."),
        end => format!("{kind} [`{key}`, `{}`)", String::from_utf8_lossy(end)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perm(key: &str, range_end: &[u8]) -> Permission {
        Permission {
            perm_type: PERM_READWRITE,
            key: key.as_bytes().to_vec(),
            range_end: range_end.to_vec(),
        }
    }

    #[test]
    fn a_permission_covers_the_prefix_when_its_range_holds_every_key_under_it() {
        let start = b"distlock/";
        let end = proto::prefix_end(start);
        // `--prefix=true distlock/`, a wider prefix, every key from a lower one.
        assert!(covers(&perm("distlock/", b"distlock0"), start, &end));
        assert!(covers(&perm("dist", b"disu"), start, &end));
        assert!(covers(&perm("a", &[0]), start, &end));
        // Another prefix, a narrower one, a single key.
        assert!(!covers(&perm("other/", b"other0"), start, &end));
        assert!(!covers(&perm("distlock/a/", b"distlock/a0"), start, &end));
        assert!(!covers(&perm("distlock/", b""), start, &end));
        assert_eq!(
            shown(&perm("distlock/", b"distlock0")),
            "readwrite [`distlock/`, `distlock0`)"
        );
    }
}
