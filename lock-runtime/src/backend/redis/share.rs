//! Shared results (`LockRequest::share`) on Redis: the value for lock `lock:K` is the string
//! `lock-share:lock:K` (in a cluster `lock-share:{lock:K}`, in the lock's slot) with a PX TTL
//! of the share's length, written with `SET … PX`, read with `GET`, dropped with `DEL`.

use super::{RedisBackend, millis};
use crate::backend::{SharedStore, Stored};
use crate::error::BoxError;
use crate::runtime::BoxFuture;

/// The prefix of a shared result's key, before the lock's name.
pub(super) const SHARE_PREFIX: &str = "lock-share:";

/// The largest value Redis takes (its default `proto-max-bulk-len`, 512 MiB).
pub(super) const SHARE_LIMIT: usize = 512 * 1024 * 1024;

impl RedisBackend {
    fn share_key(name: &str) -> String {
        format!("{SHARE_PREFIX}{name}")
    }
}

impl SharedStore for RedisBackend {
    /// `GET` of `name`'s stored result.
    fn shared_get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, BoxError>> {
        let key = Self::share_key(name);
        Box::pin(async move {
            let value = self
                .run(|mut conn, _| {
                    let key = key.clone();
                    async move { redis::cmd("GET").arg(&key).query_async(&mut conn).await }
                })
                .await?;
            Ok(value)
        })
    }

    /// `SET … PX` of `name`'s result (idempotent: a retry writes the same value).
    fn shared_put<'a>(&'a self, entry: Stored<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        let key = Self::share_key(entry.name);
        let ms = millis(entry.ttl);
        Box::pin(async move {
            self.run(|mut conn, _| {
                let key = key.clone();
                async move {
                    redis::cmd("SET")
                        .arg(&key)
                        .arg(entry.value)
                        .arg("PX")
                        .arg(ms)
                        .query_async::<()>(&mut conn)
                        .await
                }
            })
            .await?;
            Ok(())
        })
    }

    /// `DEL` of `name`'s result: whether one was there.
    fn shared_drop<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, BoxError>> {
        let key = Self::share_key(name);
        Box::pin(async move {
            let deleted: i64 = self
                .run(|mut conn, _| {
                    let key = key.clone();
                    async move { redis::cmd("DEL").arg(&key).query_async(&mut conn).await }
                })
                .await?;
            Ok(deleted > 0)
        })
    }
}
