//! What a test sees of an etcd cluster, as a human would with `etcdctl`: the keys under a
//! prefix, and the means to delete or plant keys behind a holder's back. Not public API.

use std::time::Duration;

use super::proto::{self, DeleteRangeRequest, DeleteRangeResponse, RangeRequest, RangeResponse};
use super::rpc::Rpc;

/// One key as etcd holds it.
#[derive(Debug, Clone)]
pub struct EtcdKey {
    /// The key, as text.
    pub key: String,
    /// The value, as text.
    pub value: String,
    /// The revision that created it.
    pub create_revision: i64,
    /// The lease it is attached to (0: none).
    pub lease: i64,
}

/// A plain etcd client for tests and the benchmark.
pub struct EtcdInspector {
    rpc: Rpc,
}

impl EtcdInspector {
    /// A client of the member at `host:port` (call inside a Tokio runtime).
    pub fn new(host: &str) -> EtcdInspector {
        EtcdInspector {
            rpc: Rpc::new(
                &super::rpc::Access {
                    hosts: [host.to_owned()].into(),
                    tls: None,
                    credentials: None,
                },
                Duration::from_secs(5),
            )
            .expect("a valid host"),
        }
    }

    /// Every key starting with `prefix`, lowest create revision first.
    pub async fn keys(&self, prefix: &str) -> Vec<EtcdKey> {
        let range: RangeResponse = self
            .rpc
            .unary(
                proto::path::RANGE,
                RangeRequest {
                    key: prefix.as_bytes().to_vec(),
                    range_end: proto::prefix_end(prefix.as_bytes()),
                    sort_order: proto::ASCEND,
                    sort_target: proto::SORT_BY_CREATE,
                    ..Default::default()
                },
            )
            .await
            .expect("etcd answers a range");
        range
            .kvs
            .into_iter()
            .map(|kv| EtcdKey {
                key: String::from_utf8_lossy(&kv.key).into_owned(),
                value: String::from_utf8_lossy(&kv.value).into_owned(),
                create_revision: kv.create_revision,
                lease: kv.lease,
            })
            .collect()
    }

    /// The value of `key`, as bytes (`None`: no such key).
    pub async fn value(&self, key: &str) -> Option<Vec<u8>> {
        let range: RangeResponse = self
            .rpc
            .unary(
                proto::path::RANGE,
                RangeRequest {
                    key: key.as_bytes().to_vec(),
                    ..Default::default()
                },
            )
            .await
            .expect("etcd answers a range");
        range.kvs.into_iter().next().map(|kv| kv.value)
    }

    /// Deletes every key starting with `prefix`; how many there were.
    pub async fn delete_prefix(&self, prefix: &str) -> i64 {
        let deleted: DeleteRangeResponse = self
            .rpc
            .unary(
                proto::path::DELETE_RANGE,
                DeleteRangeRequest {
                    key: prefix.as_bytes().to_vec(),
                    range_end: proto::prefix_end(prefix.as_bytes()),
                },
            )
            .await
            .expect("etcd answers a delete");
        deleted.deleted
    }

    /// Puts `key` on a fresh lease of `ttl` (whole seconds, never kept alive); the lease id.
    pub async fn put_with_lease(&self, key: &str, value: &str, ttl: Duration) -> i64 {
        let lease = self.grant_lease(ttl).await;
        let _: proto::PutResponse = self
            .rpc
            .unary(
                proto::path::PUT,
                proto::PutRequest {
                    key: key.as_bytes().to_vec(),
                    value: value.as_bytes().to_vec(),
                    lease,
                },
            )
            .await
            .expect("etcd answers a put");
        lease
    }

    /// Grants a lease of `ttl` (whole seconds), never kept alive; its id.
    pub async fn grant_lease(&self, ttl: Duration) -> i64 {
        let lease: proto::LeaseGrantResponse = self
            .rpc
            .unary(
                proto::path::LEASE_GRANT,
                proto::LeaseGrantRequest {
                    ttl: ttl.as_secs().max(1) as i64,
                },
            )
            .await
            .expect("etcd grants a lease");
        lease.id
    }

    /// The raw floor of a lock: `key` created on `lease` in a transaction only if absent,
    /// then deleted. Errors with etcd's status.
    pub async fn put_if_absent_then_delete(
        &self,
        key: &str,
        lease: i64,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let key = key.as_bytes().to_vec();
        self.take_then_delete(put_if_absent(&key, b"holder".to_vec(), lease, None), key)
            .await
    }

    /// The floor of a queue lock: `<queue><lease in hex>` created on `lease` only if absent,
    /// with a value of `value_len` bytes, and the queue's head read (its oldest key by create
    /// revision) in the same transaction — what a lock that queues its waiters must ask, and
    /// what etcd's lock service asks — then deleted. Errors with etcd's status.
    pub async fn queue_pair(
        &self,
        queue: &str,
        lease: i64,
        value_len: usize,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let queue = queue.as_bytes().to_vec();
        let key = [&queue[..], format!("{lease:x}").as_bytes()].concat();
        let head = proto::RequestOp {
            request: Some(proto::RequestUnion::Range(proto::RangeRequest {
                range_end: proto::prefix_end(&queue),
                key: queue,
                limit: 1,
                sort_order: proto::ASCEND,
                sort_target: proto::SORT_BY_CREATE,
                keys_only: true,
                ..Default::default()
            })),
        };
        let txn = put_if_absent(&key, vec![b'v'; value_len], lease, Some(head));
        self.take_then_delete(txn, key).await
    }

    /// Sends `txn`, which puts `key` if absent, then deletes `key`.
    async fn take_then_delete(
        &self,
        txn: proto::TxnRequest,
        key: Vec<u8>,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let taken: proto::TxnResponse = self.rpc.unary(proto::path::TXN, txn).await?;
        if !taken.succeeded {
            return Err(format!(
                "the floor's key {} was taken",
                String::from_utf8_lossy(&key)
            )
            .into());
        }
        let _: DeleteRangeResponse = self
            .rpc
            .unary(
                proto::path::DELETE_RANGE,
                DeleteRangeRequest {
                    key,
                    range_end: Vec::new(),
                },
            )
            .await?;
        Ok(())
    }

    /// etcd's own lock service (`v3lockpb.Lock`, what `etcdctl lock` and the `etcd-client`
    /// crate's `lock()` use): `Lock` on `name` with `lease`, then `Unlock` of the key it
    /// returns — the benchmark's peer on etcd.
    pub async fn lock_service_pair(
        &self,
        name: &str,
        lease: i64,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let key = self.lock_service_lock(name, lease).await?;
        self.lock_service_unlock(key).await
    }

    /// etcd's lock service: `Lock` on `name` with `lease`, waiting on the server while another
    /// lease holds it; the key that holds it.
    pub async fn lock_service_lock(
        &self,
        name: &str,
        lease: i64,
    ) -> Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>> {
        let locked: V3LockResponse = self
            .rpc
            .unary(
                "/v3lockpb.Lock/Lock",
                V3LockRequest {
                    name: name.as_bytes().to_vec(),
                    lease,
                },
            )
            .await?;
        Ok(locked.key)
    }

    /// etcd's lock service: `Unlock` of the `key` a `Lock` returned.
    pub async fn lock_service_unlock(
        &self,
        key: Vec<u8>,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let _: V3UnlockResponse = self
            .rpc
            .unary("/v3lockpb.Lock/Unlock", V3UnlockRequest { key })
            .await?;
        Ok(())
    }
}

/// `v3lockpb.LockRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct V3LockRequest {
    #[prost(bytes = "vec", tag = "1")]
    name: Vec<u8>,
    #[prost(int64, tag = "2")]
    lease: i64,
}

/// `v3lockpb.LockResponse` (the header, field 1, is not read).
#[derive(Clone, PartialEq, prost::Message)]
struct V3LockResponse {
    #[prost(bytes = "vec", tag = "2")]
    key: Vec<u8>,
}

/// `v3lockpb.UnlockRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct V3UnlockRequest {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
}

/// `v3lockpb.UnlockResponse` (its header is not read).
#[derive(Clone, PartialEq, prost::Message)]
struct V3UnlockResponse {}

/// A transaction that puts `key` with `value` on `lease` if it does not exist, and runs
/// `also` with the put.
fn put_if_absent(
    key: &[u8],
    value: Vec<u8>,
    lease: i64,
    also: Option<proto::RequestOp>,
) -> proto::TxnRequest {
    let put = proto::RequestOp {
        request: Some(proto::RequestUnion::Put(proto::PutRequest {
            key: key.to_vec(),
            value,
            lease,
        })),
    };
    proto::TxnRequest {
        compare: vec![proto::absent(key.to_vec())],
        success: std::iter::once(put).chain(also).collect(),
        failure: Vec::new(),
    }
}
