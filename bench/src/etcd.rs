//! Row 10, etcd: the raw floor is what the recipe cannot do without — a key created on a
//! lease in a transaction only if absent, then deleted — on one connection of the bench's own,
//! against the same member.

use std::sync::Arc;
use std::time::Duration;

use distlock::__private::testing::EtcdInspector;

use crate::Error;
use crate::sql::RawPair;

/// Raw pairs: put-if-absent `bench-raw/<key>` on a lease, delete it.
#[derive(Clone)]
pub struct EtcdRaw {
    client: Arc<EtcdInspector>,
    lease: i64,
}

impl EtcdRaw {
    /// A connection to the member at `host` and one lease (as distlock's client has per TTL).
    pub async fn connect(host: &str) -> Result<EtcdRaw, Error> {
        let client = EtcdInspector::new(host);
        let lease = client.grant_lease(Duration::from_secs(600)).await;
        Ok(EtcdRaw {
            client: Arc::new(client),
            lease,
        })
    }
}

impl RawPair for EtcdRaw {
    async fn pair(&self, _conn: usize, key: &str, _fresh: bool) -> Result<(), Error> {
        self.client
            .put_if_absent_then_delete(&format!("bench-raw/{key}"), self.lease)
            .await
    }
}

/// The floor of a queue lock: [`EtcdRaw`]'s put-if-absent with the queue's head read in the
/// same transaction and a value of `.1` bytes, then the delete.
#[derive(Clone)]
pub struct EtcdQueueFloor(pub EtcdRaw, pub usize);

impl RawPair for EtcdQueueFloor {
    async fn pair(&self, _conn: usize, key: &str, _fresh: bool) -> Result<(), Error> {
        let EtcdQueueFloor(raw, value_len) = self;
        raw.client
            .queue_pair(&format!("bench-queue/{key}/"), raw.lease, *value_len)
            .await
    }
}

/// The peer: etcd's own lock service (`v3lockpb.Lock`: `Lock` on a lease, `Unlock`), on one
/// connection of the bench's own with one lease, as `etcdctl lock` holds one session lease.
#[derive(Clone)]
pub struct EtcdLockService(EtcdRaw);

impl EtcdLockService {
    pub async fn connect(host: &str) -> Result<EtcdLockService, Error> {
        Ok(EtcdLockService(EtcdRaw::connect(host).await?))
    }
}

impl RawPair for EtcdLockService {
    async fn pair(&self, _conn: usize, key: &str, _fresh: bool) -> Result<(), Error> {
        let EtcdLockService(raw) = self;
        raw.client
            .lock_service_pair(&format!("bench-peer/{key}"), raw.lease)
            .await
    }
}

/// Handoff through etcd's lock service, shaped like distlock's row: 4 clients (a connection
/// each) × 4 tasks, every task on a lease of its own (the service's key is the lease's: one
/// lease cannot wait behind itself), `Lock` waiting on the server, then `Unlock`, for
/// `window`. Grants per second, and the p50 / p99 gap (µs) from a release to the next grant
/// of another client.
pub async fn lock_service_handoff(host: &str, window: Duration) -> Result<(f64, f64, f64), Error> {
    let mut tasks = Vec::new();
    for c in 0..4 {
        let client = Arc::new(EtcdInspector::new(host));
        for _ in 0..4 {
            let lease = client.grant_lease(Duration::from_secs(600)).await;
            let client = client.clone();
            tasks.push((c, move || {
                let client = client.clone();
                async move {
                    let key = client
                        .lock_service_lock("bench-peer/handoff", lease)
                        .await?;
                    let granted = std::time::Instant::now();
                    client.lock_service_unlock(key).await?;
                    Ok(granted)
                }
            }));
        }
    }
    crate::measure::handoff(window, tasks).await
}
