//! Shared results (`LockRequest::share`) on etcd: the value for lock `name` is the key
//! `<prefix>-shared/<name>/` (outside every lock's range, so neither the queues nor `list` see
//! it), on a lease of its own a second longer than the share, so etcd deletes it after. An
//! etcd lease counts whole seconds (and has a floor of a few): the value starts with the
//! instant it expires (unix ms, by the writing client's clock), which a reader compares with
//! its own.

use super::EtcdBackend;
use super::keys::push_queue;
use super::proto::{self, path};
use crate::backend::dated::{dated, live};
use crate::backend::{SharedStore, Stored};
use crate::error::BoxError;
use crate::runtime::BoxFuture;

/// The largest value stored: etcd's default request limit (`--max-request-bytes`, 1.5 MiB),
/// less room for the key and the request around it.
pub(super) const SHARE_LIMIT: usize = 1_536 * 1024 - 8 * 1024;

impl EtcdBackend {
    fn share_key(&self, name: &str) -> Vec<u8> {
        let mut key = format!("{}-shared/", self.prefix.trim_end_matches('/'));
        push_queue(&mut key, name);
        key.into_bytes()
    }

    async fn share_range(&self, name: &str) -> Result<Option<Vec<u8>>, BoxError> {
        const OP: &str = "read a shared result";
        let request = proto::RangeRequest {
            key: self.share_key(name),
            ..Default::default()
        };
        let answer: proto::RangeResponse = self
            .call(OP, self.rpc.unary(path::RANGE, request))
            .await
            .map_err(|failure| self.failed(OP, failure))?;
        Ok(answer.kvs.into_iter().next().map(|kv| kv.value))
    }
}

impl SharedStore for EtcdBackend {
    fn shared_get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, BoxError>> {
        Box::pin(async move { Ok(self.share_range(name).await?.as_deref().and_then(live)) })
    }

    fn shared_put<'a>(&'a self, entry: Stored<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        let Stored { name, value, ttl } = entry;
        Box::pin(async move {
            const OP: &str = "store a shared result";
            let seconds = ttl.as_secs() + 2;
            let granted: proto::LeaseGrantResponse = self
                .call(
                    OP,
                    self.rpc.unary(
                        path::LEASE_GRANT,
                        proto::LeaseGrantRequest {
                            ttl: seconds as i64,
                        },
                    ),
                )
                .await
                .map_err(|failure| self.failed(OP, failure))?;
            if !granted.error.is_empty() || granted.ttl <= 0 {
                return Err(format!(
                    "etcd ({}) refused a lease of {seconds} s for a shared result: {}",
                    self.shown, granted.error
                )
                .into());
            }
            let request = proto::PutRequest {
                key: self.share_key(name),
                value: dated(value, ttl),
                lease: granted.id,
            };
            let _: proto::PutResponse = self
                .call(OP, self.rpc.unary(path::PUT, request))
                .await
                .map_err(|failure| self.failed(OP, failure))?;
            Ok(())
        })
    }

    fn shared_drop<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move {
            const OP: &str = "drop a shared result";
            let was = self.share_range(name).await?;
            let request = proto::DeleteRangeRequest {
                key: self.share_key(name),
                ..Default::default()
            };
            let _: proto::DeleteRangeResponse = self
                .call(OP, self.rpc.unary(path::DELETE_RANGE, request))
                .await
                .map_err(|failure| self.failed(OP, failure))?;
            Ok(was.as_deref().and_then(live).is_some())
        })
    }
}
