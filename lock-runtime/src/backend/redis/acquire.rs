//! The acquisition paths: a plain lock's `SET NX PX`, the scripts (readers, permits, fenced,
//! waiting and retried attempts), fair locks, and sets of locks in one call.

use std::time::Duration;

use redis::{Cmd, Value};

use super::errors::acquire_error;
use super::{RedisBackend, millis};
use crate::backend::{Attempt, Backend, Hold, Kind, LockSpec, SetAttempt};
use crate::error::BoxError;
use crate::runtime::BoxFuture;

impl RedisBackend {
    /// One attempt (see [`Backend::try_acquire`]).
    pub(super) fn attempt<'a>(
        &'a self,
        spec: LockSpec<'a>,
    ) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        if spec.fair {
            // A future of its own: the plain path's stays small (see `locked::footprint`).
            return Box::pin(self.try_acquire_fair(spec));
        }
        Box::pin(async move {
            let lease = millis(spec.lease);
            // The hot path: a first try for a plain lock is one `SET NX PX` (`OK` when set, nil
            // when taken: read as a raw value, no string allocated). A reader, a fenced lock, a
            // waiter (which needs the holder's TTL, and marks a key its readers hold) and a
            // retry on a fresh connection (which must recognize the lock as ours if the lost
            // first try took it) run one script instead.
            let plain = spec.kind == Kind::Exclusive && !spec.fencing && !spec.waiting;
            let taken: Option<bool> = if plain {
                self.run_acked(
                    spec.lease,
                    |taken: &Option<bool>| *taken == Some(true),
                    |mut conn, attempt| {
                        let set = set_nx_px(spec.name, spec.token, lease);
                        async move {
                            if attempt > 0 {
                                return Ok(None);
                            }
                            let set: Value = set.query_async(&mut conn).await?;
                            Ok(Some(set != Value::Nil))
                        }
                    },
                )
                .await
                .map_err(acquire_error)?
            } else {
                None
            };
            match taken {
                Some(true) => Ok(Attempt::Acquired {
                    fencing_token: None,
                }),
                Some(false) => Ok(Attempt::Busy { ttl: None }),
                // Boxed: the plain path's future stays small (see `locked::footprint`). After
                // the plain path, a retry: its `SET` may have landed.
                None => Box::pin(self.try_acquire_by_script(spec, plain)).await,
            }
        })
    }

    /// An attempt by script (see `scripts::write`, `scripts::read` and `scripts::permit`): a
    /// reader's, a semaphore's permit's, or a plain lock's when it is fenced, waiting, or
    /// retried.
    ///
    /// `retried`: an earlier try of this attempt may have taken the lock (its reply was lost),
    /// so the script must take a lock already holding this token as ours. So must every try
    /// after the first here, and every try through a cluster connection, which retries
    /// commands out of sight.
    async fn try_acquire_by_script(
        &self,
        spec: LockSpec<'_>,
        retried: bool,
    ) -> Result<Attempt, BoxError> {
        let retried = retried || self.is_cluster();
        let fence_key = &self.fence_key(spec.name);
        let writers = &self.writers_key(spec.name);
        let lease = millis(spec.lease);
        // The last argument: a waiting writer's mark (ms), or a semaphore's limit.
        let (script, last) = match spec.kind {
            Kind::Exclusive if spec.waiting => {
                (&self.write, millis(crate::backend::FAIR_QUEUE_TTL))
            }
            Kind::Exclusive => (&self.write, 0),
            Kind::Shared => (&self.read, 0),
            Kind::Permits(limit) => (&self.permit, u64::from(limit)),
        };
        let marked = spec.kind == Kind::Exclusive && self.marked.has(spec.token);
        let (taken, value): (i64, i64) = self
            .run_acked(
                spec.lease,
                |&(taken, _): &(i64, i64)| taken == 1,
                |mut conn, attempt| {
                    let mut call = script.key(spec.name);
                    call.key(fence_key)
                        .key(writers)
                        .arg(spec.token)
                        .arg(lease)
                        .arg(u8::from(spec.fencing))
                        .arg(last)
                        // A retry (its first try's reply may be lost): a lock already ours is
                        // taken. (`write` reads it; `read` and `permit` look at their share.)
                        .arg(u8::from(retried || attempt > 0))
                        // Whether this writer marked the key against new readers (`write`).
                        .arg(u8::from(marked));
                    async move { call.invoke_async(&mut conn).await }
                },
            )
            .await
            .map_err(acquire_error)?;
        match taken {
            3 => self.marked.note(spec.token),
            1 if marked => self.marked.forget(spec.token),
            _ => {}
        }
        scripted_attempt(spec, taken, value)
    }

    /// A fair attempt: one script that queues the token unless the lock is free and it is
    /// first in line.
    async fn try_acquire_fair(&self, spec: LockSpec<'_>) -> Result<Attempt, BoxError> {
        let fence_key = self.fence_key(spec.name);
        let (queue, deadlines) = self.fair_keys(spec.name);
        let place = millis(crate::backend::FAIR_QUEUE_TTL);
        let (taken, value): (i64, i64) = self
            .run_acked(
                spec.lease,
                |&(taken, _): &(i64, i64)| taken == 1,
                |mut conn, _| {
                    let mut call = self.acquire_fair.key(spec.name);
                    call.key(&queue)
                        .key(&deadlines)
                        .key(&fence_key)
                        .arg(spec.token)
                        .arg(millis(spec.lease))
                        .arg(place)
                        .arg(u8::from(spec.fencing));
                    async move { call.invoke_async(&mut conn).await }
                },
            )
            .await
            .map_err(acquire_error)?;
        scripted_attempt(spec, taken, value.max(-2))
    }

    /// Several locks in one script call (see `scripts::acquire_all`).
    pub(super) async fn acquire_set(&self, specs: &[LockSpec<'_>]) -> Result<SetAttempt, BoxError> {
        let Some(first) = specs.first() else {
            return Ok(SetAttempt::Acquired {
                fencing_tokens: Vec::new(),
            });
        };
        let keys: Vec<[String; 2]> = specs
            .iter()
            .map(|spec| [self.fence_key(spec.name), self.writers_key(spec.name)])
            .collect();
        let answer: Vec<i64> = self
            .run_acked(
                first.lease,
                |answer: &Vec<i64>| answer.first() == Some(&1),
                |mut conn, _| {
                    let mut call = self.acquire_all.prepare_invoke();
                    call.arg(millis(first.lease))
                        .arg(u8::from(first.fencing))
                        .arg(u8::from(first.kind == Kind::Shared));
                    for (spec, [fence, writers]) in specs.iter().zip(&keys) {
                        call.key(spec.name).key(fence).key(writers).arg(spec.token);
                    }
                    async move { call.invoke_async(&mut conn).await }
                },
            )
            .await
            .map_err(acquire_error)?;
        let index = |i: i64| usize::try_from(i).unwrap_or(usize::MAX);
        match answer.as_slice() {
            [1, tokens @ ..] if tokens.len() == specs.len() => Ok(SetAttempt::Acquired {
                fencing_tokens: tokens
                    .iter()
                    .map(|&t| first.fencing.then_some(t as u64))
                    .collect(),
            }),
            [0, i, _] if index(*i) < specs.len() => Ok(SetAttempt::Busy { index: index(*i) }),
            [2, i, limit] if index(*i) < specs.len() => {
                let held = u16::try_from(*limit).ok().filter(|&n| n > 0);
                Err(crate::backend::Refused::kind(held, first.kind))
            }
            other => Err(format!("the set acquisition script answered {other:?}").into()),
        }
    }

    /// Gives back what an attempt whose grant the replicas did not acknowledge may have taken
    /// (quietly: errors are only logged; the lease ends it otherwise).
    pub(super) async fn give_back_unacked(&self, specs: &[LockSpec<'_>]) {
        for spec in specs {
            let hold = Hold {
                name: spec.name,
                token: spec.token,
                kind: spec.kind,
                fair: spec.fair,
            };
            if let Err(error) = Backend::release(self, hold).await {
                tracing::debug!(%error, key = spec.name, "distlock: giving back an unacknowledged grant failed");
            }
        }
    }
}

/// `SET <name> <token> NX PX <lease>` in one pre-sized command (the hot path: `redis::cmd`
/// grows its buffers argument by argument).
fn set_nx_px(name: &str, token: &str, lease: u64) -> Cmd {
    let mut set = Cmd::with_capacity(6, 3 + name.len() + token.len() + 4 + 20);
    set.arg("SET")
        .arg(name)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(lease);
    set
}

/// An acquisition script's answer `{taken, value}`: taken with the fencing token `value` (if
/// asked for), busy for `value` ms (a PTTL), or (`2`) refused: the name is held as a semaphore
/// of `value` permits, or (`0`) as a lock (see `scripts`).
fn scripted_attempt(spec: LockSpec<'_>, taken: i64, value: i64) -> Result<Attempt, BoxError> {
    match taken {
        1 => Ok(Attempt::Acquired {
            fencing_token: spec.fencing.then_some(value as u64),
        }),
        2 => {
            let held = u16::try_from(value).ok().filter(|&n| n > 0);
            Err(match (held, spec.kind) {
                (Some(held), Kind::Permits(asked)) => crate::backend::Refused::limit(held, asked),
                (held, asked) => crate::backend::Refused::kind(held, asked),
            })
        }
        // 0 busy; 3 busy, and the key marked against new readers.
        _ => Ok(Attempt::Busy {
            ttl: ttl_from_pttl(value),
        }),
    }
}

fn ttl_from_pttl(pttl: i64) -> Option<Duration> {
    match pttl {
        -2 => Some(Duration::ZERO), // gone already: retry at once
        ms if ms >= 0 => Some(Duration::from_millis(ms as u64)),
        _ => None, // no TTL (a foreign lock without expiry)
    }
}
