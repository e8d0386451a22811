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
