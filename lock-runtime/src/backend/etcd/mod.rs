//! The etcd backend (`etcd://`): etcd's own `concurrency.Mutex` recipe.
//!
//! A lock is the set of keys `<prefix>/<name>/<lease id in hex>[.<slot>]`, each attached to
//! that etcd lease, holding its owner token, and created in a transaction only if absent (see
//! [`keys::Slots`]: one client taking a lock again and again reuses one key, as etcd's own
//! mutex does). The key with the lowest create revision holds
//! the lock; every other key is a waiter that watches only the deletion of the key just
//! before its own, so a release wakes exactly one waiter — the next in line, across all
//! processes: waiters are served in the order they arrived.
//!
//! Liveness is per lease, not per lock: a key lives as long as its lease. Each distinct lease
//! (rounded up to whole seconds, etcd's TTL unit) gets an etcd lease of that TTL, kept alive
//! by a stream of keepalives (see [`lease`]), so a crashed holder's lock is freed one TTL
//! after its last keepalive. One keepalive per lease renews every lock on it. A lock-delay
//! (also rounded up to whole seconds) is added to the TTL on etcd and not counted by the
//! holder: locks with one are on a lease of their own per (lease, delay).
//!
//! Fencing tokens are the holder key's create revision: etcd's store revision, which strictly
//! increases across the whole cluster (leader changes included). Keys only ever join a queue
//! with a revision above every key in it, and the holder is the lowest, so successive holders
//! have increasing revisions.

mod acquire;
mod admin;
mod check;
#[cfg(feature = "testing")]
pub(crate) mod inspect;
mod keys;
mod lease;
mod lost;
mod permit;
mod proto;
mod release;
mod rpc;
mod share;
mod upgrade;
mod watch;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;
use tonic::{Code, Status};

use self::keys::parse_url;
#[cfg(feature = "testing")]
pub(crate) use self::keys::queue_of;
use self::lease::Lease;
use self::proto::path;
use self::rpc::Rpc;
use self::watch::Watches;
use super::sql::holder_id;
use super::{
    Attempt, Backend, Capabilities, Hold, LockSpec, Released, SetAttempt, Transient, Upgrade,
};
use crate::error::{BoxError, LockError};
use crate::fast_map::{FastMap, FastSet};
use crate::notify::{ReleaseHub, ReleaseSubscription};
use crate::runtime::BoxFuture;

/// A key this client made: a held lock or a place in a lock's queue.
struct OwnKey {
    key: Vec<u8>,
    /// The lease it is attached to.
    lease: Arc<Lease>,
    /// Its create revision: the fencing token if it comes to hold the lock.
    revision: i64,
    /// Its last revision this client wrote: the create revision, or that of the put with
    /// which an admitted permit woke the waiter behind it. Changes after it are another's.
    written: i64,
    /// The predecessor watch of a waiter, or the end-of-lease timer of an unrenewed lock.
    task: Option<AbortHandle>,
}

impl OwnKey {
    /// A key this client just created (or found) at `revision` on `lease`.
    fn created(key: Vec<u8>, lease: &Arc<Lease>, revision: i64) -> OwnKey {
        OwnKey {
            key,
            lease: Arc::clone(lease),
            revision,
            written: revision,
            task: None,
        }
    }
}

impl Drop for OwnKey {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The `etcd://` backend.
pub(crate) struct EtcdBackend {
    rpc: Rpc,
    /// The one watch stream that carries this client's watches.
    watches: Arc<Watches>,
    /// `<prefix>/`.
    prefix: String,
    /// The URL as messages show it.
    shown: String,
    response_timeout: Duration,
    /// The members, and the connect timeout: a lease is revoked on a connection of its own
    /// when the client goes (see [`lease::revoker`]).
    /// Members, TLS, credentials: for connections of the lease revokers' own.
    access: rpc::Access,
    connect_timeout: Duration,
    /// Leases by the TTL asked for and the lock-delay in it, in seconds.
    leases: Mutex<HashMap<(u64, u64), Arc<Lease>>>,
    /// Held while a lease is being granted, so concurrent acquisitions share one.
    granting: tokio::sync::Mutex<()>,
    /// This client's keys, by owner token.
    keys: Mutex<FastMap<String, OwnKey>>,
    /// The key each token uses, reserved until it is known gone.
    slots: Arc<keys::Slots>,
    /// The owner tokens of this client's acquisitions in play (see [`super::InPlay`]).
    in_play: super::InPlay,
    /// Per owner token, held while an acquiring transaction is on its way: a release waits
    /// for it, so it never overtakes the transaction that creates the key (etcd serves the
    /// calls of one connection concurrently, in no set order).
    in_flight: Mutex<FastMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Owner tokens whose acquiring transaction got no answer (a timeout, a dropped
    /// connection): it may still be applied after the token is released — etcd may hold a
    /// request back, while it has no leader say, past the moment this client gave up on it —
    /// so their release keeps watching the key for a while (see [`sweep_later`]).
    ///
    /// [`sweep_later`]: Self::sweep_later
    unanswered: Mutex<FastSet<String>>,
    /// Wake-ups by owner token: a waiter's predecessor is gone.
    hub: Arc<ReleaseHub>,
    holder: String,
}

/// Whether waiting may cure a failed call: a member down or without a leader, a timeout, a
/// dropped connection. Refusals (a request too large, no permission) are permanent.
fn is_transient(status: &Status) -> bool {
    !matches!(
        status.code(),
        Code::InvalidArgument
            | Code::PermissionDenied
            | Code::Unauthenticated
            | Code::FailedPrecondition
            | Code::OutOfRange
            | Code::Unimplemented
    )
}

/// A call's failure: etcd's status, or one of ours (a timeout).
type EtcdFailure = super::CallFailure<Status>;

/// The etcd lease for locks of a spec's `lease` (the lock-delay in it) and `lock_delay`: its
/// TTL and the delay in it, in whole seconds — the lease and the delay each rounded up, so
/// that the holder counts on its lease and etcd keeps the key at least the delay longer.
fn lease_seconds(lease: Duration, lock_delay: Duration) -> (u64, u64) {
    let delay = match lock_delay.is_zero() {
        true => 0,
        false => ttl_seconds(lock_delay),
    };
    (ttl_seconds(lease.saturating_sub(lock_delay)) + delay, delay)
}

/// The TTL, in whole seconds, of the lease for locks of `lease`: rounded up, so a lock never
/// outlives its holder by less than its lease.
fn ttl_seconds(lease: Duration) -> u64 {
    lease.as_millis().div_ceil(1000).max(1) as u64
}

impl EtcdBackend {
    /// The backend for `url`, not yet connected (the channel connects on its first call).
    fn new(
        url: &str,
        tls: Option<crate::tls::TlsConfig>,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<EtcdBackend, LockError> {
        let parsed = parse_url(url)?;
        let shown = crate::url::redact_url(url);
        let access = rpc::Access {
            hosts: parsed.hosts.clone().into(),
            tls,
            credentials: parsed.credentials.clone(),
        };
        let rpc = Rpc::new(&access, connect_timeout)
            .map_err(|why| LockError::Config(format!("invalid etcd URL `{shown}`: {why}")))?;
        Ok(EtcdBackend {
            watches: Arc::new(Watches::new(rpc.clone())),
            rpc,
            prefix: format!("{}/", parsed.prefix),
            shown,
            response_timeout,
            access,
            connect_timeout,
            leases: Mutex::new(HashMap::new()),
            granting: tokio::sync::Mutex::new(()),
            keys: Mutex::default(),
            slots: Arc::default(),
            in_play: super::InPlay::default(),
            in_flight: Mutex::default(),
            unanswered: Mutex::default(),
            hub: ReleaseHub::new(None),
            holder: holder_id(),
        })
    }

    /// Connects: parses the URL and grants the lease for the default lease, which tells
    /// whether etcd answers. Fails with an error naming the URL if it cannot within
    /// `connect_timeout`.
    pub(crate) async fn connect(
        url: &str,
        tls: Option<crate::tls::TlsConfig>,
        connect_timeout: Duration,
        response_timeout: Duration,
        default_lease: Duration,
    ) -> Result<Arc<dyn Backend>, LockError> {
        let backend = EtcdBackend::new(url, tls, connect_timeout, response_timeout)?;
        let fail = |source: BoxError| LockError::Connect {
            url: backend.shown.clone(),
            reason: source.to_string(),
            source: Some(source),
        };
        // With credentials, a wrong password fails here (etcd grants a lease without any).
        let checked =
            async {
                backend.rpc.authenticate(None).await.map_err(|status| {
                    backend.failed("authenticate", EtcdFailure::Server(status))
                })?;
                backend.lease_for(default_lease, Duration::ZERO).await
            };
        match tokio::time::timeout(connect_timeout, checked).await {
            Ok(Ok(_)) => Ok(Arc::new(backend)),
            Ok(Err(error)) => {
                let transient = error.downcast_ref::<Transient>().is_some();
                let why = match transient {
                    true => backend.why_not().await,
                    false => String::new(),
                };
                Err(fail(Transient::wrap_if(
                    transient,
                    format!(
                        "cannot reach etcd at {}: {error}; {why}check that the cluster is up \
                         and reachable from here",
                        backend.shown
                    ),
                )))
            }
            Err(_) => {
                let why = backend.why_not().await;
                Err(fail(Transient::wrap(format!(
                    "cannot reach etcd at {} within the connect timeout ({connect_timeout:?}): \
                     {why}check that the cluster is up and reachable from here",
                    backend.shown
                ))))
            }
        }
    }

    /// Why no member answered, as far as a connection of our own to the first one tells (a
    /// TLS failure reaches the gRPC channel as a bare "connection closed" as often as not),
    /// ending in `; `; empty when it tells nothing.
    async fn why_not(&self) -> String {
        #[cfg(feature = "tls")]
        {
            let host = self
                .access
                .hosts
                .first()
                .map(String::as_str)
                .unwrap_or_default();
            match &self.access.tls {
                Some(tls) => {
                    let Ok(config) = tls.rustls(crate::tls::Verify::Full) else {
                        return String::new();
                    };
                    let within = self.connect_timeout;
                    if let Some(why) =
                        crate::tls::why_handshake_fails(Arc::new(config), host, within).await
                    {
                        return format!("{why}; ");
                    }
                }
                None => {
                    if crate::tls::speaks_tls(host, self.connect_timeout).await {
                        return "the port speaks TLS: use `etcds://` (with `cacert=` for a \
                             private CA); "
                            .to_owned();
                    }
                }
            }
        }
        String::new()
    }

    fn keys(&self) -> MutexGuard<'_, FastMap<String, OwnKey>> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs one call, bounded by the response timeout.
    fn call<T>(
        &self,
        op: &str,
        request: impl std::future::Future<Output = Result<T, Status>>,
    ) -> impl std::future::Future<Output = Result<T, EtcdFailure>> {
        let store = ("etcd", self.shown.as_str());
        EtcdFailure::bounded(store, self.response_timeout, op, request)
    }

    /// The error for a failed call: names the operation and the URL, and says whether
    /// waiting may cure it.
    fn failed(&self, op: &str, failure: EtcdFailure) -> BoxError {
        match failure {
            EtcdFailure::Server(status) => {
                // A TLS failure's cause is in the status's sources, not its message.
                let chain = crate::tls::chain(&status);
                let why = match crate::tls::explain(&chain, "cacert") {
                    Some(hint) => format!("{hint} ({chain})"),
                    None => format!("{} ({:?})", status.message(), status.code()),
                };
                Transient::wrap_if(
                    is_transient(&status),
                    format!("etcd `{op}` failed ({}): {why}", self.shown),
                )
            }
            EtcdFailure::Other(error) => error,
        }
    }

    /// Gives up `lease` if `failure` says etcd no longer has it.
    fn note_lease_error(&self, lease: &Lease, failure: &EtcdFailure) {
        if let EtcdFailure::Server(status) = failure
            && status.code() == Code::NotFound
            && status.message().contains("lease")
        {
            lease.abandon(
                format!(
                    "etcd ({}) no longer has its lease: {}",
                    self.shown,
                    status.message()
                ),
                &self.rpc,
            );
        }
    }

    /// The lease for locks of `lease` (a spec's: the lock-delay in it) and `lock_delay`: a
    /// usable one, or a new one.
    async fn lease_for(
        &self,
        lease: Duration,
        lock_delay: Duration,
    ) -> Result<Arc<Lease>, BoxError> {
        let seconds = lease_seconds(lease, lock_delay);
        let usable = |leases: &HashMap<(u64, u64), Arc<Lease>>| {
            leases
                .get(&seconds)
                .filter(|l| l.is_usable())
                .map(Arc::clone)
        };
        if let Some(lease) = usable(&self.leases.lock().unwrap_or_else(|p| p.into_inner())) {
            return Ok(lease);
        }
        // Boxed: every acquisition awaits this, and only the first per TTL grants.
        Box::pin(self.grant_lease(seconds, usable)).await
    }

    /// Grants the lease of `seconds` (the TTL, the lock-delay in it) unless another
    /// acquisition did meanwhile (`usable`).
    async fn grant_lease(
        &self,
        (seconds, delay): (u64, u64),
        usable: impl Fn(&HashMap<(u64, u64), Arc<Lease>>) -> Option<Arc<Lease>>,
    ) -> Result<Arc<Lease>, BoxError> {
        let _granting = self.granting.lock().await;
        if let Some(lease) = usable(&self.leases.lock().unwrap_or_else(|p| p.into_inner())) {
            return Ok(lease);
        }
        let sent_at = Instant::now();
        let granted: proto::LeaseGrantResponse = self
            .call(
                "grant a lease",
                self.rpc.unary(
                    path::LEASE_GRANT,
                    proto::LeaseGrantRequest {
                        ttl: seconds as i64,
                    },
                ),
            )
            .await
            .map_err(|failure| self.failed("grant a lease", failure))?;
        if !granted.error.is_empty() || granted.ttl <= 0 {
            return Err(Transient::wrap(format!(
                "etcd ({}) refused a lease of {seconds} s: {}",
                self.shown, granted.error
            )));
        }
        let lease = Arc::new(Lease::start(
            self.rpc.clone(),
            granted.id,
            (
                Duration::from_secs(granted.ttl as u64),
                Duration::from_secs(delay),
            ),
            sent_at,
            self.shown.clone(),
            lease::revoker(
                self.access.clone(),
                self.connect_timeout,
                self.response_timeout,
                granted.id,
            ),
        ));
        self.leases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((seconds, delay), Arc::clone(&lease));
        Ok(lease)
    }
}

/// Every kind, queued on the server (so fair), kept alive by the client's lease; sets of plain
/// locks in one transaction (readers and permits queue behind the keys before them).
pub(crate) const CAPABILITIES: Capabilities = Capabilities {
    wakes: "a watch on the key before its own",
    announces: true,
    sets: true,
    fair: true,
    queues_waiters: true,
    keeps_alive: true,
    upgradable: Ok(()),
    shares: Ok(share::SHARE_LIMIT),
    ..Capabilities::every_kind("etcd")
};

impl Backend for EtcdBackend {
    fn capabilities(&self) -> &Capabilities {
        &CAPABILITIES
    }

    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        Box::pin(self.in_play.attempt(spec.token, move || self.acquire(spec)))
    }

    fn try_acquire_all<'a>(
        &'a self,
        specs: &'a [LockSpec<'a>],
    ) -> BoxFuture<'a, Result<SetAttempt, BoxError>> {
        let tokens: Vec<&str> = specs.iter().map(|spec| spec.token).collect();
        Box::pin(async move {
            let attempt = self
                .in_play
                .attempt_all(&tokens, move || self.acquire_set(specs))
                .await;
            if let Ok(SetAttempt::Busy { .. }) = attempt {
                // Nothing was written: the tokens are out of play, their gates unneeded.
                self.in_play.forget(&tokens);
                let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
                for token in &tokens {
                    in_flight.remove(*token);
                    self.slots.free(token);
                }
            }
            attempt
        })
    }

    fn renew<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(self.check(spec))
    }

    fn end_in<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        // A key lives as long as its lease: the client deletes it at the end (see
        // `guard::give_back::keep_until_min_hold`), and the lease is not revoked before then.
        let lease = self
            .keys()
            .get(spec.token)
            .map(|held| Arc::clone(&held.lease));
        if let Some(lease) = lease {
            lease.keep_until(Instant::now() + spec.lease);
        }
        Box::pin(self.check(spec))
    }

    fn release<'a>(&'a self, hold: Hold<'a>) -> BoxFuture<'a, Result<Released, BoxError>> {
        let (name, token) = (hold.name, hold.token);
        Box::pin(self.in_play.release(token, move || async move {
            match crate::token::is_upgradable(token) {
                // Boxed: the rare path, kept out of every release's own box.
                true => Box::pin(self.release_upgradable(name, token)).await,
                false => self.release_key(token).await,
            }
        }))
    }

    fn upgrade<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Upgrade, BoxError>> {
        Box::pin(self.upgrade(spec))
    }

    fn abandon_upgrade<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        Box::pin(self.drop_upgrade(spec.token))
    }

    fn subscribe<'a>(
        &'a self,
        spec: LockSpec<'a>,
    ) -> BoxFuture<'a, Result<ReleaseSubscription, BoxError>> {
        let subscription = self.hub.subscribe(spec.token, || {});
        Box::pin(async move { Ok(subscription) })
    }

    fn lost<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, String> {
        Box::pin(self.watch_lost(spec))
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        super::loss::close_all(&self.leases)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_round_up() {
        assert_eq!(ttl_seconds(Duration::from_millis(10)), 1);
        assert_eq!(ttl_seconds(Duration::from_millis(1_000)), 1);
        assert_eq!(ttl_seconds(Duration::from_millis(1_001)), 2);
        // A spec's lease has its lock-delay in it: each part is rounded up on its own.
        let ms = Duration::from_millis;
        assert_eq!(lease_seconds(ms(2_500), ms(1_500)), (3, 2));
        assert_eq!(lease_seconds(ms(3_000), Duration::ZERO), (3, 0));
        assert_eq!(lease_seconds(ms(10_001), ms(1)), (11, 1));
    }

    /// A lock's acquisition and release are boxed once each: what they hold across their
    /// awaits is moved into that box whole, and sizes past glibc's per-thread cache (1,032
    /// bytes) take malloc's slow path. An acquisition's common path stays under it (its
    /// transaction's call is boxed apart, to finish if the caller gives up); a release and a
    /// renewal await one call, whose tonic future is most of theirs. (They were 14,520 and
    /// 12,664 bytes while the wrappers took the futures they awaited as arguments, which
    /// keeps each twice, and the rare paths were not boxed.)
    #[tokio::test]
    async fn an_acquisition_and_a_release_box_little() {
        let second = Duration::from_secs(1);
        let etcd = EtcdBackend::new("etcd://127.0.0.1:1/footprint", None, second, second)
            .expect("a valid URL");
        let spec = LockSpec {
            name: "k",
            token: "t",
            lease: second,
            fencing: false,
            renew: true,
            waiting: false,
            fair: false,
            kind: super::super::Kind::Exclusive,
            lock_delay: Duration::ZERO,
        };
        let call = std::mem::size_of_val(&etcd.rpc.unary::<_, proto::DeleteRangeResponse>(
            path::DELETE_RANGE,
            proto::DeleteRangeRequest::default(),
        ));
        for (op, size, limit) in [
            (
                "try_acquire",
                std::mem::size_of_val(&*etcd.try_acquire(spec)),
                1032,
            ),
            (
                "release",
                std::mem::size_of_val(&*etcd.release(spec.hold())),
                call + 640,
            ),
            (
                "renew",
                std::mem::size_of_val(&*etcd.renew(spec)),
                call + 768,
            ),
        ] {
            assert!(
                size <= limit,
                "etcd's {op} boxes {size} bytes (at most {limit})"
            );
        }
    }
}
