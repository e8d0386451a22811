//! The one subscription per client to the bucket's republished writes: a delete or an expiry
//! marker of a key wakes that key's waiters, and tells the acquisition's news (`news`) the
//! revision that freed it.

use std::sync::Arc;

use async_nats::header;

use super::news::{News, hear};
use super::table_ops::LEFT_HEADER;
use super::{EVENTS, KV_OPERATION, Listener, NatsBackend};
use crate::error::BoxError;
use crate::notify::{CloseOnDrop, ReleaseHub};
use crate::runtime::RuntimeBound;

impl NatsBackend {
    /// The live listener, or a new one: subscribed (and the subscription flushed to the
    /// server) before it is returned, so a release after that is heard.
    pub(super) async fn listener(&self) -> Result<Arc<Listener>, BoxError> {
        let conn = self.conn().await.map_err(crate::backend::Transient::wrap)?;
        let (bucket, response_timeout) = (self.bucket.clone(), self.response_timeout);
        let news = Arc::clone(&self.news);
        self.listener
            .get(
                |listener: &Listener| {
                    listener.runtime.is_alive()
                        && !listener.dead.load(std::sync::atomic::Ordering::SeqCst)
                },
                || {
                    Box::pin(async move {
                        let prefix = format!("{EVENTS}.{bucket}.");
                        let mut events = conn
                            .client
                            .subscribe(format!("{prefix}>"))
                            .await
                            .map_err(|e| Box::new(e) as BoxError)?;
                        // The subscription in place before the first try (bounded: a hung
                        // server answers no PING).
                        match tokio::time::timeout(response_timeout, conn.client.flush()).await {
                            Ok(flushed) => flushed.map_err(|e| Box::new(e) as BoxError)?,
                            Err(_) => {
                                return Err(format!(
                                    "the subscription that wakes waiters was not confirmed \
                                     within the response timeout ({response_timeout:?})"
                                )
                                .into());
                            }
                        }
                        let hub = ReleaseHub::new(None);
                        let (closer, dead) = CloseOnDrop::new(&hub);
                        tokio::spawn(async move {
                            use futures_util::StreamExt as _;
                            let closer = closer;
                            // Keeps the connection (and so the subscription) open.
                            let _conn = conn;
                            while let Some(event) = events.next().await {
                                let Some(headers) = &event.headers else {
                                    continue;
                                };
                                let freed = headers.get(KV_OPERATION).is_some()
                                    || headers.get(header::NATS_MARKER_REASON).is_some();
                                // A place left the key's table: its waiters may be admitted
                                // (of a fair lock's queue, the one named).
                                let left = headers.get(LEFT_HEADER).map(|next| next.to_string());
                                let name = event
                                    .subject
                                    .strip_prefix(prefix.as_str())
                                    .and_then(NatsBackend::name_of);
                                let Some(name) = name else { continue };
                                if freed {
                                    // Heard only of keys this client asked for.
                                    let revision = headers
                                        .get(header::NATS_SEQUENCE)
                                        .and_then(|s| s.as_str().parse().ok());
                                    if let Some(revision) = revision {
                                        let at = tokio::time::Instant::now();
                                        hear(&news, &name, Some(News::Freed(revision, at)), false);
                                    }
                                    closer.hub.notify(&name);
                                } else if let Some(next) = left {
                                    match next.as_str() {
                                        "-" => closer.hub.notify(&name),
                                        next => closer.hub.notify_one(&name, next),
                                    }
                                }
                            }
                        });
                        Ok(Arc::new(Listener {
                            hub,
                            dead,
                            runtime: RuntimeBound::new(()),
                        }))
                    })
                },
            )
            .await
    }
}
