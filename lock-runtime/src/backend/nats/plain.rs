//! A plain lock's bare token: its acquisition (one compare-and-set over the revision last
//! seen; the put runs to its answer in a task of its own and stays registered while in
//! flight, so that a release of that token waits for it), its renewal and its release. The
//! other kinds, and a plain lock that finds a table, go through the key's table
//! (`table_ops.rs`).

use std::time::Duration;

use super::*;

impl NatsBackend {
    pub(super) fn remember(&self, token: &str, written: Written) {
        self.written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(token.to_owned(), written);
    }

    pub(super) fn written(&self, token: &str) -> Option<Written> {
        self.written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(token)
            .copied()
    }

    /// An acquisition that found its own bare token at `last` (a retry whose first put landed,
    /// maybe long before): held once its TTL is renewed, since the guard counts its lease from
    /// this attempt. Another write in between: busy, and asked again.
    pub(super) async fn landed(
        &self,
        conn: &Conn,
        spec: LockSpec<'_>,
        last: &Last,
    ) -> Result<Attempt, BoxError> {
        let put = Some((spec.token, spec.lease, Some(last.granted)));
        match self.write(conn, spec.name, last.revision, put).await? {
            Ok(revision) => {
                self.remember(
                    spec.token,
                    Written {
                        last: revision,
                        granted: last.granted,
                        table: false,
                    },
                );
                Ok(Attempt::Acquired {
                    fencing_token: spec.fencing.then_some(last.granted),
                })
            }
            Err(Conflict) => Ok(Attempt::Busy {
                ttl: Some(Duration::from_millis(10)),
            }),
        }
    }

    pub(super) fn forget(&self, token: &str) {
        self.written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(token);
    }

    pub(super) async fn acquire_once(
        &self,
        conn: &Arc<Conn>,
        spec: LockSpec<'_>,
    ) -> Result<Attempt, BoxError> {
        // Readers, permits and fair locks are places of the key's table.
        if spec.kind != Kind::Exclusive || spec.fair {
            return self.acquire_place(conn, spec, None).await;
        }
        // A key heard free (or never heard of) is put at once: one round trip for a grant. A
        // refused put (the key was not as heard) reads the key, as a key heard held does.
        if let Some(expected) = self.expected_free(spec.name)
            && let Ok(revision) = self.put_in_flight(conn, spec, expected, None).await?
        {
            return Ok(Attempt::Acquired {
                fencing_token: spec.fencing.then_some(revision),
            });
        }
        // A loser of a race reads again: the winner's put, or (rarely) a key freed meanwhile.
        for _ in 0..3 {
            let last = self.last(conn, spec.name).await?;
            let expected = match &last {
                None => 0,
                Some(last) => match &last.token {
                    // Readers, permits, a writer's mark or a fair queue: the key's table.
                    Some(value) if value.starts_with(table::TABLE) => {
                        return self.acquire_place(conn, spec, Some(last.clone())).await;
                    }
                    // A retry whose first try landed.
                    Some(token) if token == spec.token => {
                        self.hear(spec.name, None);
                        return self.landed(conn, spec, last).await;
                    }
                    Some(_) => {
                        self.hear(spec.name, Some(News::Held));
                        return Ok(Attempt::Busy { ttl: last.ttl });
                    }
                    None => last.revision,
                },
            };
            if let Ok(revision) = self.put_in_flight(conn, spec, expected, None).await? {
                self.hear(spec.name, None);
                return Ok(Attempt::Acquired {
                    fencing_token: spec.fencing.then_some(revision),
                });
            }
        }
        Ok(Attempt::Busy { ttl: None })
    }

    /// An acquisition's put — its bare token, or (`table`) the key's table with the
    /// acquisition's place and its headers — run to its answer in a task of its own, finished
    /// and remembered even if the acquisition is cancelled meanwhile, and registered in
    /// `in_flight` until then.
    pub(super) async fn put_in_flight(
        &self,
        conn: &Arc<Conn>,
        spec: LockSpec<'_>,
        expected: u64,
        table: Option<table_ops::TablePut>,
    ) -> Result<Result<u64, Conflict>, BoxError> {
        let (done, waiting) = tokio::sync::watch::channel(false);
        let token = spec.token.to_owned();
        self.in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(token.clone(), waiting);
        let (conn, subject, lease) = (Arc::clone(conn), self.subject(spec.name), spec.lease);
        let (written, in_flight) = (Arc::clone(&self.written), Arc::clone(&self.in_flight));
        let unanswered = Arc::clone(&self.unanswered);
        let tabled = table.is_some();
        let put = tokio::spawn(async move {
            let result = match &table {
                None => write_to(&conn, subject, Some(expected), Some((&token, lease, None))).await,
                Some(table) => table.write(&conn, subject, expected).await,
            };
            if result.is_err() {
                unanswered
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(token.clone());
            }
            if let Ok(Ok(revision)) = &result {
                let known = Written {
                    last: *revision,
                    granted: *revision,
                    table: tabled,
                };
                written
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(token.clone(), known);
            }
            in_flight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&token);
            let _ = done.send(true);
            result
        });
        put.await.map_err(crate::backend::Transient::wrap)?
    }

    /// Waits (at most the response timeout) for an acquisition's put of `token` still on its
    /// way.
    pub(super) async fn settled(&self, token: &str) {
        let waiting = self
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(token)
            .cloned();
        if let Some(mut waiting) = waiting {
            let _ =
                tokio::time::timeout(self.response_timeout, waiting.wait_for(|done| *done)).await;
        }
    }

    pub(super) async fn renew_key(&self, spec: LockSpec<'_>) -> Result<bool, BoxError> {
        let conn = self.conn().await.map_err(crate::backend::Transient::wrap)?;
        let mut written = self.written(spec.token);
        if spec.kind != Kind::Exclusive || spec.fair || written.is_some_and(|known| known.table) {
            return self.renew_place(&conn, spec).await;
        }
        for _ in 0..3 {
            let known = match written {
                Some(known) => known,
                // Not written by this client since it started (or forgotten): ours if the key
                // holds our token.
                None => match self.last(&conn, spec.name).await? {
                    Some(Last {
                        token: Some(token),
                        revision,
                        granted,
                        ..
                    }) if token == spec.token => Written {
                        last: revision,
                        granted,
                        table: false,
                    },
                    // Held in the key's table (a writer granted beside others' places).
                    Some(Last {
                        token: Some(value), ..
                    }) if value.starts_with(table::TABLE) => {
                        return self.renew_place(&conn, spec).await;
                    }
                    _ => {
                        self.forget(spec.token);
                        return Ok(false);
                    }
                },
            };
            let put = Some((spec.token, spec.lease, Some(known.granted)));
            match self.write(&conn, spec.name, known.last, put).await? {
                Ok(revision) => {
                    self.remember(
                        spec.token,
                        Written {
                            last: revision,
                            granted: known.granted,
                            table: false,
                        },
                    );
                    return Ok(true);
                }
                // Another write came between: ours (a renewal whose answer was lost) or not;
                // read it.
                Err(Conflict) => written = None,
            }
        }
        Ok(false)
    }

    /// How often a release whose read or write failed (a timeout, a dropped connection) is
    /// tried again, after 10 and 40 ms: a release to a dead server gives up within three
    /// response timeouts.
    const RELEASE_RETRIES: u32 = 2;

    pub(super) async fn release_key(&self, hold: Hold<'_>) -> Result<Released, BoxError> {
        let released = self.release_once(hold).await;
        // After the settling in it: an acquisition's put got no answer, and may land yet.
        if self.was_unanswered(hold.token)
            && let Ok(conn) = self.conn().await
        {
            self.sweep_later(conn, hold.name, hold.token);
        }
        released
    }

    /// Each try on the live connection, fetched again after a failure: a release that runs
    /// as its runtime shuts down (a guard dropped with the runtime's tasks, released on
    /// another) meets a connection whose runtime is going, and its retry opens one on its own.
    pub(super) async fn release_once(&self, hold: Hold<'_>) -> Result<Released, BoxError> {
        let mut written = self.written(hold.token);
        if written.is_none() {
            // Not known here: an acquisition's put may still be on its way.
            self.settled(hold.token).await;
            written = self.written(hold.token);
        }
        // A try whose reply was lost (a timeout, a dropped connection) may have landed: tried
        // again, what the retry finds is ambiguous.
        let mut retried = false;
        let mut failed = 0;
        loop {
            let conn = match self.conn().await {
                Ok(conn) => conn,
                Err(error) if failed < Self::RELEASE_RETRIES => {
                    failed += 1;
                    tracing::debug!(%error, "distlock: a release's connection failed; retrying");
                    tokio::time::sleep(crate::backend::retry_pause(failed)).await;
                    continue;
                }
                Err(error) => return Err(crate::backend::Transient::wrap(error)),
            };
            let conn = &conn;
            let expected = match written {
                Some(known) if !known.table => known.last,
                _ => match self.last(conn, hold.name).await {
                    Ok(Some(Last {
                        token: Some(token),
                        revision,
                        ..
                    })) if token == hold.token => revision,
                    // A place of the key's table.
                    Ok(Some(last))
                        if last
                            .token
                            .as_deref()
                            .is_some_and(|value| value.starts_with(table::TABLE)) =>
                    {
                        match self.leave_place(conn, hold, last).await {
                            Ok(Some(left)) => return Ok(Released::after_tries(left, retried)),
                            // Written meanwhile: read again.
                            Ok(None) => continue,
                            Err(error) if failed < Self::RELEASE_RETRIES => {
                                failed += 1;
                                retried = true;
                                tracing::debug!(%error, "distlock: a release failed; retrying");
                                tokio::time::sleep(crate::backend::retry_pause(failed)).await;
                                continue;
                            }
                            Err(error) => return Err(error),
                        }
                    }
                    Ok(_) => {
                        self.forget(hold.token);
                        return Ok(Released::after_tries(false, retried));
                    }
                    Err(error) if failed < Self::RELEASE_RETRIES => {
                        failed += 1;
                        tracing::debug!(%error, "distlock: a release's read failed; retrying");
                        tokio::time::sleep(crate::backend::retry_pause(failed)).await;
                        continue;
                    }
                    Err(error) => return Err(error),
                },
            };
            match self.write(conn, hold.name, expected, None).await {
                Ok(Ok(revision)) => {
                    self.forget(hold.token);
                    let freed = News::Freed(revision, tokio::time::Instant::now());
                    self.hear(hold.name, Some(freed));
                    return Ok(Released::Deleted);
                }
                Ok(Err(Conflict)) => written = None,
                Err(error) if failed < Self::RELEASE_RETRIES => {
                    failed += 1;
                    retried = true;
                    written = None;
                    tracing::debug!(%error, "distlock: a release failed; retrying");
                    tokio::time::sleep(crate::backend::retry_pause(failed)).await;
                }
                Err(error) => return Err(error),
            }
        }
    }
}
