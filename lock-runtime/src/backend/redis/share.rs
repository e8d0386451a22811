//! Shared results (`LockRequest::share`) on Redis: the value for lock `lock:K` is the string
//! `lock-share:lock:K` (in a cluster `lock-share:{lock:K}`, in the lock's slot) with a PX TTL
//! of the share's length, written with `SET … PX`, read with `GET`, dropped with `DEL`.

use std::time::Duration;

use super::{RedisBackend, millis};
use crate::error::BoxError;

/// The prefix of a shared result's key, before the lock's name.
pub(super) const SHARE_PREFIX: &str = "lock-share:";

/// The largest value Redis takes (its default `proto-max-bulk-len`, 512 MiB).
pub(super) const SHARE_LIMIT: usize = 512 * 1024 * 1024;

impl RedisBackend {
    fn share_key(name: &str) -> String {
        format!("{SHARE_PREFIX}{name}")
    }

    /// `GET` of `name`'s stored result.
    pub(crate) async fn shared_value(&self, name: &str) -> Result<Option<Vec<u8>>, BoxError> {
        let key = Self::share_key(name);
        let value = self
            .run(|mut conn, _| {
                let key = key.clone();
                async move { redis::cmd("GET").arg(&key).query_async(&mut conn).await }
            })
            .await?;
        Ok(value)
    }

    /// `SET … PX` of `name`'s result (idempotent: a retry writes the same value).
    pub(crate) async fn share_value(
        &self,
        name: &str,
        value: &[u8],
        ttl: Duration,
    ) -> Result<(), BoxError> {
        let key = Self::share_key(name);
        let ms = millis(ttl);
        self.run(|mut conn, _| {
            let key = key.clone();
            async move {
                redis::cmd("SET")
                    .arg(&key)
                    .arg(value)
                    .arg("PX")
                    .arg(ms)
                    .query_async::<()>(&mut conn)
                    .await
            }
        })
        .await?;
        Ok(())
    }

    /// `DEL` of `name`'s result: whether one was there.
    pub(crate) async fn forget_value(&self, name: &str) -> Result<bool, BoxError> {
        let key = Self::share_key(name);
        let deleted: i64 = self
            .run(|mut conn, _| {
                let key = key.clone();
                async move { redis::cmd("DEL").arg(&key).query_async(&mut conn).await }
            })
            .await?;
        Ok(deleted > 0)
    }
}
