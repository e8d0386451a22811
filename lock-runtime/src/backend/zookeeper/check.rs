//! What [`LockClient::check`](crate::LockClient::check) reports of ZooKeeper beyond the lock it
//! takes: who the session is (`whoami`), what the chroot's ACL lets that identity do, and the
//! server's clock (the creation time it stamps on a node) against this host's.

use zookeeper_client as zk;

use super::ZookeeperBackend;
use crate::admin::{Finding, clock_check, identity_finding};

/// What a lock needs on the chroot: list its parents (read), make them (create) and let them
/// go (delete).
const NEEDED: [zk::Permission; 3] = [
    zk::Permission::CREATE,
    zk::Permission::READ,
    zk::Permission::DELETE,
];

impl ZookeeperBackend {
    pub(super) async fn diagnose_server(&self) -> Vec<Finding> {
        let Ok(client) = self.any_client().await else {
            // The lock line says why.
            return Vec::new();
        };
        // `whoami` (ZooKeeper 3.7 and later): the schemes and ids the session is known by.
        let whoami = self
            .call("whoami", client.list_auth_users())
            .await
            .ok()
            .filter(|users| !users.is_empty());
        let who = whoami.as_ref().map(|users| {
            users
                .iter()
                .map(|user| format!("{}:{}", user.scheme(), user.user()))
                .collect::<Vec<_>>()
                .join(", ")
        });
        let tls = self.url.secure.then_some("");
        // Without `whoami` (a server before 3.7) the session is `world:anyone`, plus the URL's
        // digest user when it has one.
        let users = whoami.unwrap_or_else(|| self.digest_identity());
        vec![
            identity_finding(who.as_deref(), tls),
            self.acl(&client, &users).await,
            clock_check(self.server_time(&client)).await,
        ]
    }

    /// The URL's digest user, as `whoami` would name it.
    fn digest_identity(&self) -> Vec<zk::AuthUser> {
        let Some(digest) = &self.url.digest else {
            return Vec::new();
        };
        let text = String::from_utf8_lossy(&digest.0);
        let user = text.split_once(':').map_or(&*text, |(user, _)| user);
        vec![zk::AuthUser::new("digest", user)]
    }

    /// The chroot's ACL (`getAcl`), and whether it grants this identity what locks need.
    async fn acl(&self, client: &zk::Client, users: &[zk::AuthUser]) -> Finding {
        let root = if self.url.chroot.is_empty() {
            "/"
        } else {
            self.url.chroot.as_str()
        };
        let acls = match self.call("getAcl", client.get_acl("/")).await {
            Ok((acls, _)) => acls,
            Err(failure) => {
                let error = self.failed("getAcl", failure);
                return Finding::fail(
                    "acl",
                    format!("cannot read the ACL of `{root}`: {error}"),
                    format!("give the URL's identity `r` (and `cdr` for locks) on `{root}`"),
                );
            }
        };
        let shown = acls
            .iter()
            .map(|acl| {
                format!(
                    "{}:{}:{}",
                    acl.scheme(),
                    acl.id(),
                    letters(acl.permission())
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let granted = acls
            .iter()
            .filter(|acl| applies(acl, users))
            .fold(zk::Permission::NONE, |all, acl| all | acl.permission());
        let missing: String = NEEDED
            .into_iter()
            .filter(|permission| !granted.has(*permission))
            .map(letters)
            .collect();
        if missing.is_empty() {
            return Finding::pass(
                "acl",
                format!(
                    "`{root}` grants this identity `{}` ({shown})",
                    letters(granted)
                ),
            );
        }
        let identity = users
            .iter()
            .find(|user| user.scheme() == "digest")
            .map_or("world:anyone".to_owned(), |user| {
                format!("digest:{}:<its digest>", user.user())
            });
        Finding::fail(
            "acl",
            format!(
                "`{root}` grants this identity `{}`, locks need `cdr` too: `{missing}` is \
                 missing ({shown})",
                letters(granted)
            ),
            format!(
                "give the URL's identity `cdrwa` on `{root}`, as a user allowed to: `setAcl \
                 {root} {identity}:cdrwa` in zkCli.sh (keep the entries already there)"
            ),
        )
    }

    /// The server's time: the creation time (`ctime`, the server's clock in milliseconds) of an
    /// ephemeral node made and deleted at once beside the lock parents. `None` when it cannot
    /// be made (the `acl` line tells why).
    async fn server_time(&self, client: &zk::Client) -> Option<f64> {
        let path = format!(
            "/{}{:016x}.clock",
            crate::admin::CHECK_KEY_PREFIX.trim_end_matches(':'),
            fastrand::u64(..)
        );
        let options = zk::CreateMode::Ephemeral.with_acls(self.access.acls());
        let (stat, _) = self
            .call("create", client.create(&path, b"", &options))
            .await
            .ok()?;
        let _ = self.call("delete", client.delete(&path, None)).await;
        Some(stat.ctime as f64 / 1e3)
    }
}

/// Whether an ACL entry applies to a session known as `users` (and to every session:
/// `world:anyone`). A digest entry's id is `user:hash`; an `auth` entry names the creator's
/// own ids, which the server has already written out as `digest` entries.
fn applies(acl: &zk::Acl, users: &[zk::AuthUser]) -> bool {
    if (acl.scheme(), acl.id()) == ("world", "anyone") {
        return true;
    }
    users.iter().any(|user| {
        user.scheme() == acl.scheme()
            && match acl.scheme() {
                "digest" => acl.id().split_once(':').map(|(name, _)| name) == Some(user.user()),
                _ => acl.id() == user.user(),
            }
    })
}

/// `crdwa` letters of a permission, as zkCli.sh prints them.
fn letters(permission: zk::Permission) -> String {
    [
        (zk::Permission::CREATE, 'c'),
        (zk::Permission::READ, 'r'),
        (zk::Permission::DELETE, 'd'),
        (zk::Permission::WRITE, 'w'),
        (zk::Permission::ADMIN, 'a'),
    ]
    .into_iter()
    .filter(|(bit, _)| permission.has(*bit))
    .map(|(_, letter)| letter)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acl_applies_to_anyone_or_to_the_digest_user_it_names() {
        let app = [
            zk::AuthUser::new("ip", "127.0.0.1"),
            zk::AuthUser::new("digest", "app"),
        ];
        let entry = |scheme, id| zk::Acl::new(zk::Permission::ALL, zk::AuthId::new(scheme, id));
        assert!(applies(&entry("world", "anyone"), &app));
        assert!(applies(&entry("digest", "app:x1Hash="), &app));
        assert!(!applies(&entry("digest", "other:x1Hash="), &app));
        assert!(applies(&entry("ip", "127.0.0.1"), &app));
        assert!(!applies(&entry("digest", "app:x1Hash="), &[]));
        assert_eq!(letters(zk::Permission::ALL), "crdwa");
        assert_eq!(letters(zk::Permission::READ), "r");
    }
}
