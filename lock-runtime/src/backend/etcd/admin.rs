//! The admin view (`Admin`): the keys of a lock's queue as a holder and its waiters.

use std::time::Duration;

use super::EtcdBackend;
use super::keys::kind_of;
use super::lost::next_answer;
use super::proto::{
    self, DeleteRangeRequest, DeleteRangeResponse, KeyValue, RangeRequest, RangeResponse, path,
};
use crate::admin::{ChangeFeed, Entry, Listing, holder_from_record};
use crate::backend::{Admin, Freed, Kind};
use crate::error::BoxError;
use crate::runtime::BoxFuture;

impl Admin for EtcdBackend {
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move {
            let queue = self.queue_key(name);
            let keys = self.range_prefix(&queue).await?;
            let keys: Vec<&KeyValue> = keys.iter().collect();
            match keys.first() {
                Some(_) => Ok(Some(self.entry(name, &keys).await?)),
                None => Ok(None),
            }
        })
    }
    fn list<'a>(&'a self, listing: Listing<'a>) -> BoxFuture<'a, Result<Vec<Entry>, BoxError>> {
        Box::pin(async move {
            // Every key under the prefix, oldest first; grouped by lock: the first of each
            // group holds it.
            let start = self.prefix.clone().into_bytes();
            let keys = self.range_prefix(&start).await?;
            // By lock name (sorted), each queue oldest first.
            let mut queues: std::collections::BTreeMap<String, Vec<&KeyValue>> = Default::default();
            for kv in &keys {
                let Some(rest) = kv.key.strip_prefix(start.as_slice()) else {
                    continue;
                };
                let rest = String::from_utf8_lossy(rest);
                let Some((encoded, _token)) = rest.rsplit_once('/') else {
                    continue;
                };
                let name = encoded.replace("%2F", "/").replace("%25", "%");
                if !listing.matches(&name) {
                    continue;
                }
                queues.entry(name).or_default().push(kv);
            }
            let mut entries = Vec::new();
            for (name, members) in queues.into_iter().take(listing.limit) {
                entries.push(self.entry(&name, &members).await?);
            }
            Ok(entries)
        })
    }
    fn force_release<'a>(&'a self, name: &'a str) -> Freed<'a> {
        Box::pin(async move {
            let queue = self.queue_key(name);
            let keys = self.range_prefix(&queue).await?;
            let keys: Vec<&KeyValue> = keys.iter().collect();
            if keys.is_empty() {
                return Ok(None);
            }
            let entry = self.entry(name, &keys).await?;
            // Deleting the holders' keys wakes the next in line (it watches such a key) and
            // tells each holder (it watches its own key too).
            for holder in &keys[..holders(&keys)] {
                let _: DeleteRangeResponse = self
                    .call(
                        "delete",
                        self.rpc.unary(
                            path::DELETE_RANGE,
                            DeleteRangeRequest {
                                key: holder.key.clone(),
                                range_end: Vec::new(),
                            },
                        ),
                    )
                    .await
                    .map_err(|f| self.failed("delete", f))?;
            }
            Ok(Some(entry))
        })
    }
    fn server_version(&self) -> BoxFuture<'_, Result<String, BoxError>> {
        Box::pin(async move {
            let status: proto::StatusResponse = self
                .call(
                    "status",
                    self.rpc.unary(path::STATUS, proto::StatusRequest {}),
                )
                .await
                .map_err(|f| self.failed("status", f))?;
            Ok(format!("etcd {}", status.version))
        })
    }
    /// Who the client is, what its roles allow under the prefix (`check.rs`).
    fn diagnose(&self) -> BoxFuture<'_, Vec<crate::admin::Finding>> {
        Box::pin(self.diagnose_server())
    }
    /// A put of `<prefix>raw/<name>` in a transaction only if it is absent, then its delete:
    /// the least a lock on etcd takes (distlock's own key carries a lease and the queue's head).
    fn raw_pair<'a>(
        &'a self,
        name: &'a str,
        token: &'a str,
        _lease: Duration,
    ) -> BoxFuture<'a, Option<Result<(), BoxError>>> {
        Box::pin(async move {
            let key = format!("{}raw/{name}", self.prefix).into_bytes();
            let txn = proto::TxnRequest {
                compare: vec![proto::absent(key.clone())],
                success: vec![proto::RequestOp {
                    request: Some(proto::RequestUnion::Put(proto::PutRequest {
                        key: key.clone(),
                        value: token.as_bytes().to_vec(),
                        lease: 0,
                    })),
                }],
                failure: Vec::new(),
            };
            let pair = async {
                let put: proto::TxnResponse = self
                    .call("txn", self.rpc.unary(path::TXN, txn))
                    .await
                    .map_err(|f| self.failed("txn", f))?;
                if !put.succeeded {
                    return Err(format!("`{name}` is held: nothing taken").into());
                }
                self.delete_key(key)
                    .await
                    .map_err(|f| self.failed("delete", f))?;
                Ok::<(), BoxError>(())
            };
            Some(pair.await)
        })
    }
    /// A watch of every key under the backend's prefix (puts, deletes — a lease's end deletes
    /// its keys too) on the client's shared watch stream.
    fn changes<'a>(
        &'a self,
        _prefix: &'a str,
    ) -> BoxFuture<'a, Result<Option<ChangeFeed>, BoxError>> {
        Box::pin(async move {
            let start = self.prefix.clone().into_bytes();
            let end = proto::prefix_end(&start);
            let mut watch = self.watches.open(start, end, 0, Vec::new());
            let created = self.call("watch", next_answer(&mut watch)).await;
            created.map_err(|f| self.failed("watch", f))?;
            Ok(Some(ChangeFeed::spawn(move |changed| async move {
                while let Ok(answer) = next_answer(&mut watch).await {
                    if !answer.events.is_empty() {
                        changed.send_replace(());
                    }
                }
            })))
        })
    }
}

impl EtcdBackend {
    /// Every key starting with `start`, lowest create revision first.
    async fn range_prefix(&self, start: &[u8]) -> Result<Vec<KeyValue>, BoxError> {
        let range: RangeResponse = self
            .call(
                "range",
                self.rpc.unary(
                    path::RANGE,
                    RangeRequest {
                        key: start.to_vec(),
                        range_end: proto::prefix_end(start),
                        sort_order: proto::ASCEND,
                        sort_target: proto::SORT_BY_CREATE,
                        ..Default::default()
                    },
                ),
            )
            .await
            .map_err(|f| self.failed("range", f))?;
        Ok(range.kvs)
    }

    /// The admin view of lock `name` whose queue is `keys` (oldest first): held by the first
    /// key, or by the readers at its head.
    async fn entry(&self, name: &str, keys: &[&KeyValue]) -> Result<Entry, BoxError> {
        let held = holders(keys);
        let waiters = Some((keys.len() - held) as u64);
        let permits = kind_of(keys[0]).permits();
        if permits.is_some() || reader_key(keys[0]) {
            let readers = keys[..held].iter().map(|kv| token_of(kv)).collect();
            return Ok(Entry {
                permits,
                ..Entry::read_by(name, readers, waiters)
            });
        }
        let holder = keys[0];
        let value = String::from_utf8_lossy(&holder.value);
        let field = |name: &str| field(&value, name);
        let since = field("joined_unix_ms").and_then(|ms| ms.parse().ok());
        let ttl = if holder.lease == 0 {
            None
        } else {
            let left: proto::LeaseTimeToLiveResponse = self
                .call(
                    "lease time-to-live",
                    self.rpc.unary(
                        path::LEASE_TIME_TO_LIVE,
                        proto::LeaseTimeToLiveRequest { id: holder.lease },
                    ),
                )
                .await
                .map_err(|f| self.failed("lease time-to-live", f))?;
            u64::try_from(left.ttl).ok().map(Duration::from_secs)
        };
        Ok(Entry {
            name: name.to_owned(),
            token: Some(token_of(holder)),
            holder: holder_from_record(field("holder").unwrap_or_default(), since),
            ttl,
            fencing_token: u64::try_from(holder.create_revision).ok(),
            waiters,
            readers: Vec::new(),
            permits: None,
        })
    }
}

/// A field `name=…` of a queue key's value.
fn field<'v>(value: &'v str, name: &str) -> Option<&'v str> {
    value
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
}

/// The owner token of a queue key: its value's `token=` (see `EtcdBackend::value_of`), or for
/// a key of another recipe (etcd's own mutex), its name's last segment.
fn token_of(kv: &KeyValue) -> String {
    let value = String::from_utf8_lossy(&kv.value);
    match field(&value, "token") {
        Some(token) => token.to_owned(),
        None => {
            let key = String::from_utf8_lossy(&kv.key);
            key.rsplit_once('/').map_or(&*key, |(_, s)| s).to_owned()
        }
    }
}

/// Whether a queue key is a reader's (see `keys::Slots::key`).
fn reader_key(kv: &KeyValue) -> bool {
    kind_of(kv) == Kind::Shared
}

/// How many keys at the head of a queue (oldest first) hold the lock: the readers there, a
/// semaphore's first `n`, or the first key.
fn holders(keys: &[&KeyValue]) -> usize {
    match keys.first().map(|first| kind_of(first)) {
        Some(Kind::Shared) => keys.iter().take_while(|kv| reader_key(kv)).count(),
        Some(Kind::Permits(n)) => keys.len().min(n as usize),
        Some(Kind::Exclusive) => 1,
        None => 0,
    }
}
