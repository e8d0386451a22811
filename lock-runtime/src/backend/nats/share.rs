//! Shared results on NATS: the key of `lock-share:<name>` in the locks' bucket, with the
//! share's TTL (whole seconds, rounded up, ended by the server) and the exact share in a header.

use std::time::Duration;

use async_nats::header;
use async_nats::jetstream::stream;

use super::{Conflict, KV_OPERATION, NatsBackend, Put, unix_now, write_bytes, write_to};
use crate::backend::{SharedStore, Stored};
use crate::error::BoxError;
use crate::runtime::BoxFuture;

/// The largest shared result kept: under NATS's default message size (1 MiB), headers aside.
pub(super) const SHARE_LIMIT: usize = 1_000_000;
/// Where a lock's shared result lives: the key of `lock-share:<name>`, beside the locks.
const SHARE_PREFIX: &str = "lock-share:";
/// The header of a shared result that gives its share exactly, in milliseconds: the server's
/// TTL is whole seconds, and a result read after its share is not returned.
const SHARE_MS_HEADER: &str = "Distlock-Share-Ms";

/// A shared result is the key of `lock-share:<name>`, with the share's TTL (whole seconds,
/// rounded up): the server ends it.
impl SharedStore for NatsBackend {
    fn shared_get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, BoxError>> {
        Box::pin(async move {
            let conn = self.conn().await?;
            let read = conn
                .stream
                .get_last_raw_message_by_subject(&self.subject(&format!("{SHARE_PREFIX}{name}")))
                .await;
            match read {
                Ok(message)
                    if message.headers.get(KV_OPERATION).is_none()
                        && message.headers.get(header::NATS_MARKER_REASON).is_none() =>
                {
                    // Past its exact share (the server keeps it to the next whole second):
                    // not returned.
                    let share = message
                        .headers
                        .get(SHARE_MS_HEADER)
                        .and_then(|ms| ms.as_str().parse().ok())
                        .map(Duration::from_millis);
                    let ended = share.is_some_and(|share| {
                        let written = Duration::from_nanos(
                            u64::try_from(message.time.unix_timestamp_nanos()).unwrap_or(0),
                        );
                        unix_now() >= written + share
                    });
                    Ok((!ended).then(|| message.payload.to_vec()))
                }
                Ok(_) => Ok(None),
                Err(error) if error.kind() == stream::LastRawMessageErrorKind::NoMessageFound => {
                    Ok(None)
                }
                Err(error) => Err(error.into()),
            }
        })
    }

    fn shared_put<'a>(&'a self, entry: Stored<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        Box::pin(async move {
            let conn = self.conn().await?;
            let subject = self.subject(&format!("{SHARE_PREFIX}{}", entry.name));
            let put = Put {
                value: entry.value,
                lease: entry.ttl,
                headers: &[(SHARE_MS_HEADER, entry.ttl.as_millis().to_string())],
            };
            write_bytes(&conn, subject, None, Some(put))
                .await?
                .map_err(|Conflict| "the shared result changed under the write".into())
                .map(drop)
        })
    }

    fn shared_drop<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move {
            let stored = self.shared_get(name).await?.is_some();
            if stored {
                let conn = self.conn().await?;
                let subject = self.subject(&format!("{SHARE_PREFIX}{name}"));
                let _ = write_to(&conn, subject, None, None).await?;
            }
            Ok(stored)
        })
    }
}
