//! Shared results (`LockRequest::share`) on ZooKeeper: the value for lock `name` is the
//! persistent node `/%shared/<name>` (the name encoded as a lock's parent is; `%shared` is no
//! lock's parent, whose names are encoded with `%XX` escapes only, so neither the queues nor
//! `list` see it). ZooKeeper has no expiry of its own for such a node: the value starts with the
//! instant it expires (unix ms, by the writing client's clock), which a reader compares with
//! its own. An expired node is deleted by the next look at it, by `forget`, or overwritten by
//! the next result; a key never asked for again leaves its node (one per key) until then.

use zookeeper_client as zk;

use super::path::parent_of;
use super::{ZkFailure, ZookeeperBackend};
use crate::backend::dated::{dated, live};
use crate::backend::{SharedStore, Stored};
use crate::error::BoxError;
use crate::runtime::BoxFuture;

/// The node every shared result lives under.
const SHARED: &str = "/%shared";

/// The largest value stored: ZooKeeper's default `jute.maxbuffer` (1 MiB), less room for the
/// request around it.
pub(super) const SHARE_LIMIT: usize = 1024 * 1024 - 8 * 1024;

fn path_of(name: &str) -> String {
    format!("{SHARED}{}", parent_of(name))
}

impl ZookeeperBackend {
    /// The stored node's value and version, if it exists.
    async fn share_read(
        &self,
        client: &zk::Client,
        path: &str,
    ) -> Result<Option<(Vec<u8>, i32)>, BoxError> {
        match self.call("get", client.get_data(path)).await {
            Ok((data, stat)) => Ok(Some((data, stat.version))),
            Err(ZkFailure::Server(zk::Error::NoNode)) => Ok(None),
            Err(failure) => Err(self.failed("get", failure)),
        }
    }
}

impl SharedStore for ZookeeperBackend {
    fn shared_get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, BoxError>> {
        Box::pin(async move {
            let client = self.any_client().await?;
            let path = path_of(name);
            let Some((data, version)) = self.share_read(&client, &path).await? else {
                return Ok(None);
            };
            let value = live(&data);
            if value.is_none() {
                // Expired: gone unless rewritten meanwhile (the version says).
                let _ = self
                    .call("delete", client.delete(&path, Some(version)))
                    .await;
            }
            Ok(value)
        })
    }

    fn shared_put<'a>(&'a self, entry: Stored<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        let Stored { name, value, ttl } = entry;
        Box::pin(async move {
            let client = self.any_client().await?;
            let path = path_of(name);
            let data = dated(value, ttl);
            let options = zk::CreateMode::Persistent.with_acls(self.access.acls());
            for _ in 0..4 {
                match self.call("set", client.set_data(&path, &data, None)).await {
                    Ok(_) => return Ok(()),
                    Err(ZkFailure::Server(zk::Error::NoNode)) => {}
                    Err(failure) => return Err(self.failed("set", failure)),
                }
                match self
                    .call("create", client.create(&path, &data, &options))
                    .await
                {
                    Ok(_) => return Ok(()),
                    // Made by another writer meanwhile: set it.
                    Err(ZkFailure::Server(zk::Error::NodeExists)) => continue,
                    Err(ZkFailure::Server(zk::Error::NoNode)) => {
                        match self
                            .call("create", client.create(SHARED, &[], &options))
                            .await
                        {
                            Ok(_) | Err(ZkFailure::Server(zk::Error::NodeExists)) => {}
                            Err(failure) => return Err(self.failed("create", failure)),
                        }
                    }
                    Err(failure) => return Err(self.failed("create", failure)),
                }
            }
            Err(format!("the shared result's node {path} kept changing under four tries").into())
        })
    }

    fn shared_drop<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move {
            let client = self.any_client().await?;
            let path = path_of(name);
            let Some((data, _)) = self.share_read(&client, &path).await? else {
                return Ok(false);
            };
            match self.call("delete", client.delete(&path, None)).await {
                Ok(()) | Err(ZkFailure::Server(zk::Error::NoNode)) => {}
                Err(failure) => return Err(self.failed("delete", failure)),
            }
            Ok(live(&data).is_some())
        })
    }
}
