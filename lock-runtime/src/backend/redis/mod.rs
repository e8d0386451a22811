//! `redis://` / `rediss://`: one Redis server (or a Sentinel-managed primary behind one address);
//! `redis+cluster://`: a Redis Cluster. The Redlock backend (`redlock://`) uses one of these per
//! independent master.
//!
//! Layout (kept plain on purpose, so services in other languages share locks with us): the lock
//! for key `K` is the string `<prefix>K` (default `lock:K`) holding the owner token, with a PX
//! TTL. It is the single-instance pattern from the Redis documentation and the layout of
//! redis-py's `Lock`.
//!
//! Round trips: a free lock is taken with one `SET NX PX`; a release is one `EVALSHA`
//! (compare-token, `DEL`, `PUBLISH`); a renewal is one `EVALSHA` (compare-token, `PEXPIRE`).
//! A busy lock costs one more `EVALSHA` to read the holder's TTL. Fencing acquisitions are one
//! `EVALSHA` (`SET NX PX` + `INCR` of the key's counter).
//!
//! Waiters are woken through one pub/sub connection per client: the release script publishes
//! on the channel named like the lock key, and the client subscribes to a channel only while
//! somebody in this process waits on it.
//!
//! In a cluster the client wraps every lock name in a hash tag (`{lock:K}`) and puts fencing
//! counters under `<fence prefix>{lock:K}`, so every key one script touches lives in one slot;
//! scripts are routed by their first key and redis-rs follows `MOVED`/`ASK` redirections. A
//! cluster-wide `PUBLISH` reaches subscribers on every node, so the pub/sub connection is a plain
//! connection to any one node (the next one is tried when it dies). Batched renewals are split
//! by slot, one script call per slot.
//!
//! Files: this one holds the backend, its keys and its `Backend` impl; `scripts` the Lua it runs;
//! `cluster` what differs in a Redis Cluster; `pubsub` the wake-on-release subscriber;
//! `nodes` multi-node URLs; `redlock` the Redlock algorithm over several of these backends.
//! The shared connection's lanes and retries are in `connection`, the checks made when
//! connecting in `check`, the acquisition paths in `acquire`, releases and batched renewals in
//! `release`, and which errors are transient in `errors`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::{AsyncConnectionConfig, Script};

use super::{
    Admin, Attempt, Backend, Capabilities, Handover, Hold, Kind, LockSpec, Released, SetAttempt,
    Upgrade,
};
use crate::admin::{Entry, Listing};
use crate::error::{BoxError, LockError};
use crate::notify::ReleaseSubscription;
use crate::runtime::{BoxFuture, Revived};
use crate::url::redact_url;

mod acquire;
mod admin;
mod check;
mod cluster;
mod connection;
mod errors;
mod nodes;
mod pubsub;
pub(crate) mod redlock;
mod release;
mod scripts;
pub(crate) mod sentinel;
mod share;
mod upgrade;

use crate::backend::Freed;
pub(crate) use cluster::cluster_slot;
use connection::SharedConnection;
use errors::{not_acked, rides_out_failover};
pub(crate) use nodes::{node_urls, take_replicas};
use pubsub::Subscriber;
use scripts::VOTE;

/// Prefixes of a fair lock's queue (a list of waiting tokens) and of its waiters' deadlines (a
/// sorted set), before the lock's name: `lock-queue:lock:K`, `lock-queue-deadlines:lock:K`
/// (in a cluster `lock-queue:{lock:K}`, in the lock's slot). Both expire when nobody waits.
const FAIR_QUEUE_PREFIX: &str = "lock-queue:";
const FAIR_DEADLINES_PREFIX: &str = "lock-queue-deadlines:";
/// Prefix of the key where writers waiting for a lock's readers mark it (see `scripts.rs`).
const WRITERS_PREFIX: &str = "lock-writers:";

/// How often a command that failed on a dropped connection is retried (with the same token),
/// unless the settings say otherwise.
pub(crate) const RETRIES: u32 = 3;

/// Connection settings for the Redis backend.
#[derive(Clone, Debug)]
pub(crate) struct RedisSettings {
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    pub fence_prefix: String,
    /// Retries of a command that failed on a dropped connection (Redlock nodes use none: a
    /// node that does not answer is skipped, not waited for).
    pub retries: u32,
    /// `?replicas=N`: grants and renewals count only once N replicas acknowledged them.
    pub replicas: u16,
    /// TLS (`rediss://`, `rediss+cluster://`, `rediss+sentinel://`, `redlocks://`): the
    /// trust and identity every connection uses; `None` for plain connections.
    pub tls: Option<crate::tls::TlsConfig>,
}

/// A redis-rs client for one `redis://` or `rediss://` URL, with the settings' TLS trust and
/// identity when it has them.
pub(crate) fn open_client(
    url: &str,
    tls: Option<&crate::tls::TlsConfig>,
) -> redis::RedisResult<redis::Client> {
    #[cfg(feature = "tls")]
    if let Some(tls) = tls {
        return redis::Client::build_with_tls(url, certificates(tls));
    }
    let _ = tls;
    redis::Client::open(url)
}

/// The settings' TLS trust and identity as redis-rs takes them (it builds rustls' settings
/// itself, with the process's default provider: made ring's here unless the application chose).
#[cfg(feature = "tls")]
fn certificates(tls: &crate::tls::TlsConfig) -> redis::TlsCertificates {
    crate::tls::ensure_default_provider();
    redis::TlsCertificates {
        client_tls: match (&tls.cert_pem, &tls.key_pem) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            _ => None,
        },
        root_cert: tls.ca_pem.clone(),
    }
}

/// How the backend reaches Redis (one per backend, so the variants' sizes do not matter).
#[allow(clippy::large_enum_variant)]
enum Link {
    Single(redis::Client),
    Cluster(ClusterClient),
    /// The master the sentinels name, asked again whenever a connection is made.
    Sentinel(sentinel::Sentinels),
}

pub(crate) struct RedisBackend {
    link: Link,
    /// Where the pub/sub connection may go: the server, or every node of a cluster.
    pubsub_nodes: Vec<redis::Client>,
    capabilities: Capabilities,
    url: String,
    settings: RedisSettings,
    config: AsyncConnectionConfig,
    /// One per lane ([`SHARED`](connection::SHARED), [`ACKED`](connection::ACKED)).
    connection: [Mutex<Option<SharedConnection>>; 2],
    /// Numbers the connections made, so a failed command forgets only the one it ran on.
    connections_made: std::sync::atomic::AtomicU64,
    reconnecting: tokio::sync::Mutex<()>,
    subscriber: Revived<Subscriber>,
    release: Script,
    renew: Script,
    renew_many: Script,
    write: Script,
    read: Script,
    permit: Script,
    release_read: Script,
    hand_over: Script,
    vote: Script,
    acquire_fair: Script,
    release_fair: Script,
    acquire_all: Script,
    upgrade: Script,
    /// The tokens of this client's waiting writers that marked a key against new readers (see
    /// `scripts::write`): only their grant has a mark to take back.
    marked: Marked,
}

/// A set of owner tokens, with a count that lets the plain lock's paths skip it (no lock
/// taken) while it is empty — as it is unless readers and writers of a key meet.
#[derive(Default)]
pub(super) struct Marked {
    count: std::sync::atomic::AtomicUsize,
    tokens: std::sync::Mutex<crate::fast_map::FastSet<String>>,
}

impl Marked {
    fn tokens(&self) -> std::sync::MutexGuard<'_, crate::fast_map::FastSet<String>> {
        self.tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `token` marked a key.
    pub(super) fn note(&self, token: &str) {
        let mut tokens = self.tokens();
        if tokens.insert(token.to_owned()) {
            self.count
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether `token` marked a key.
    pub(super) fn has(&self, token: &str) -> bool {
        self.count.load(std::sync::atomic::Ordering::Relaxed) > 0 && self.tokens().contains(token)
    }

    /// Forgets `token` (its grant took the mark back, or it was given up).
    pub(super) fn forget(&self, token: &str) {
        if self.count.load(std::sync::atomic::Ordering::Relaxed) > 0 && self.tokens().remove(token)
        {
            self.count
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// What Redis serves — every kind, fair locks, sets in one script, writers' marks, hand-overs —
/// on one server (`kind` `redis`), a `cluster` (its hash slots) or behind `sentinel`s (a
/// release rides a failover out).
pub(crate) fn capabilities(kind: &'static str, cluster: bool, sentinel: bool) -> Capabilities {
    Capabilities {
        slot: cluster.then_some(cluster_slot as fn(&str) -> u16),
        sets: true,
        sets_of_shares: true,
        marks_waiting_writers: true,
        fair: true,
        hands_over: true,
        rides_out: sentinel.then_some(rides_out_failover as fn(&BoxError) -> bool),
        upgradable: Ok(()),
        shares: Ok(share::SHARE_LIMIT),
        wakes: "a pub/sub message",
        announces: true,
        ..Capabilities::every_kind(kind)
    }
}

impl RedisBackend {
    /// Parses the URL, connects (bounded by the connect timeout), checks the server answers
    /// and accepts our credentials, and loads the scripts.
    pub(crate) async fn connect(
        url: &str,
        settings: RedisSettings,
    ) -> Result<Arc<RedisBackend>, LockError> {
        let backend = Arc::new(RedisBackend::new(url, settings)?);
        backend.check().await?;
        Ok(backend)
    }

    /// Parses the URL without connecting (a Redlock node may be down when the client starts).
    pub(crate) fn new(url: &str, settings: RedisSettings) -> Result<RedisBackend, LockError> {
        let shown = redact_url(url);
        let client = open_client(url, settings.tls.as_ref())
            .map_err(|e| LockError::Config(format!("invalid Redis URL {shown}: {e}")))?;
        Ok(RedisBackend::with_link(
            Link::Single(client.clone()),
            vec![client],
            "redis",
            shown,
            settings,
        ))
    }

    fn with_link(
        link: Link,
        pubsub_nodes: Vec<redis::Client>,
        kind: &'static str,
        shown: String,
        settings: RedisSettings,
    ) -> RedisBackend {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(settings.connect_timeout))
            .set_response_timeout(Some(settings.response_timeout));
        let capabilities = capabilities(
            kind,
            matches!(link, Link::Cluster(_)),
            matches!(link, Link::Sentinel(_)),
        );
        RedisBackend {
            link,
            pubsub_nodes,
            capabilities,
            url: shown,
            settings,
            config,
            connection: [Mutex::new(None), Mutex::new(None)],
            connections_made: Default::default(),
            reconnecting: tokio::sync::Mutex::new(()),
            subscriber: Revived::new(),
            release: Script::new(&scripts::release()),
            renew: Script::new(&scripts::renew()),
            renew_many: Script::new(&scripts::renew_many()),
            write: Script::new(&scripts::write()),
            read: Script::new(&scripts::read()),
            permit: Script::new(&scripts::permit()),
            release_read: Script::new(&scripts::release_read()),
            hand_over: Script::new(&scripts::hand_over()),
            vote: Script::new(VOTE),
            acquire_fair: Script::new(&scripts::acquire_fair()),
            release_fair: Script::new(&scripts::release_fair()),
            acquire_all: Script::new(&scripts::acquire_all()),
            upgrade: Script::new(&scripts::upgrade()),
            marked: Marked::default(),
        }
    }

    /// The URL for messages (password redacted).
    pub(crate) fn shown_url(&self) -> &str {
        &self.url
    }

    fn fence_key(&self, name: &str) -> String {
        format!("{}{}", self.settings.fence_prefix, name)
    }

    /// Where writers waiting for `name`'s readers mark it.
    fn writers_key(&self, name: &str) -> String {
        format!("{WRITERS_PREFIX}{name}")
    }

    /// A fair lock's queue and deadline keys.
    fn fair_keys(&self, name: &str) -> (String, String) {
        (
            format!("{FAIR_QUEUE_PREFIX}{name}"),
            format!("{FAIR_DEADLINES_PREFIX}{name}"),
        )
    }

    fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster(_))
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl Backend for RedisBackend {
    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn upgrade<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Upgrade, BoxError>> {
        Box::pin(self.upgrade_by_script(spec, false))
    }

    fn abandon_upgrade<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        Box::pin(async move { self.upgrade_by_script(spec, true).await.map(|_| ()) })
    }

    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        if self.settings.replicas > 0 {
            return Box::pin(async move {
                let attempt = self.attempt(spec).await;
                if attempt.as_ref().is_err_and(not_acked) {
                    self.give_back_unacked(&[spec]).await;
                }
                attempt
            });
        }
        self.attempt(spec)
    }

    fn try_acquire_all<'a>(
        &'a self,
        specs: &'a [LockSpec<'a>],
    ) -> BoxFuture<'a, Result<SetAttempt, BoxError>> {
        Box::pin(async move {
            let attempt = self.acquire_set(specs).await;
            if attempt.as_ref().is_err_and(not_acked) {
                self.give_back_unacked(specs).await;
            }
            attempt
        })
    }

    fn renew<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move {
            let lease = millis(spec.lease);
            let renewed: i64 = self
                .run_acked(
                    spec.lease,
                    |&renewed: &i64| renewed == 1,
                    |mut conn, _| {
                        let mut call = self.renew.key(spec.name);
                        call.arg(spec.token)
                            .arg(lease)
                            .arg(u8::from(spec.kind != Kind::Exclusive));
                        async move { call.invoke_async(&mut conn).await }
                    },
                )
                .await?;
            Ok(renewed == 1)
        })
    }

    fn renew_many<'a>(
        &'a self,
        specs: &'a [LockSpec<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, String>>> {
        Box::pin(async move {
            // The renewer groups locks by `Capabilities::group` (the slot in a cluster), so every spec
            // here shares one slot and one script call takes them all.
            match self.renew_batch(specs).await {
                Ok(renewed) => renewed.into_iter().map(Ok).collect(),
                Err(error) => vec![Err(error.to_string()); specs.len()],
            }
        })
    }

    fn release<'a>(&'a self, hold: Hold<'a>) -> BoxFuture<'a, Result<Released, BoxError>> {
        let (name, token) = (hold.name, hold.token);
        if hold.fair {
            return Box::pin(async move {
                let (queue, deadlines) = self.fair_keys(name);
                let keys = [name, &queue, &deadlines];
                self.release_with(&self.release_fair, &keys, token).await
            });
        }
        Box::pin(async move {
            let script = match hold.kind {
                Kind::Exclusive => &self.release,
                Kind::Shared | Kind::Permits(_) => &self.release_read,
            };
            let writers = self.writers_key(name);
            self.release_with(script, &[name, &writers], token).await
        })
    }

    fn hand_over<'a>(
        &'a self,
        from: &'a str,
        to: LockSpec<'a>,
    ) -> BoxFuture<'a, Result<Handover, BoxError>> {
        Box::pin(async move {
            let fence_key = self.fence_key(to.name);
            let lease = millis(to.lease);
            let handed: i64 = self
                .run_acked(
                    to.lease,
                    |&handed: &i64| handed != -1,
                    |mut conn, attempt| {
                        let mut call = self.hand_over.key(to.name);
                        call.key(&fence_key)
                            .arg(from)
                            .arg(to.token)
                            .arg(lease)
                            .arg(u8::from(to.fencing))
                            .arg(u8::from(attempt > 0));
                        async move { call.invoke_async(&mut conn).await }
                    },
                )
                .await?;
            Ok(match handed {
                -1 => Handover::NotHeld,
                token => Handover::Handed {
                    fencing_token: to.fencing.then_some(token as u64),
                },
            })
        })
    }

    fn subscribe<'a>(
        &'a self,
        spec: LockSpec<'a>,
    ) -> BoxFuture<'a, Result<ReleaseSubscription, BoxError>> {
        let (name, token) = (spec.name, spec.fair.then_some(spec.token));
        Box::pin(async move {
            let subscriber = self.subscriber().await?;
            Ok(subscriber.subscribe(name, token).await?)
        })
    }
}

impl Admin for RedisBackend {
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(self.inspect_lock(name))
    }
    fn list<'a>(&'a self, listing: Listing<'a>) -> BoxFuture<'a, Result<Vec<Entry>, BoxError>> {
        Box::pin(self.list_locks(listing))
    }
    fn force_release<'a>(&'a self, name: &'a str) -> Freed<'a> {
        Box::pin(self.force_release_lock(name))
    }
    fn server_version(&self) -> BoxFuture<'_, Result<String, BoxError>> {
        Box::pin(self.version())
    }
    fn changes<'a>(
        &'a self,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::admin::ChangeFeed>, BoxError>> {
        Box::pin(self.change_feed(prefix))
    }
    fn diagnose(&self) -> BoxFuture<'_, Vec<crate::admin::Finding>> {
        Box::pin(self.diagnose_server())
    }
    /// `SET name token NX PX lease`, then `DEL name`, on the shared connection.
    fn raw_pair<'a>(
        &'a self,
        name: &'a str,
        token: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Option<Result<(), BoxError>>> {
        Box::pin(async move {
            let pair = async {
                let ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
                let set: Option<String> = self
                    .run(|mut conn, _| async move {
                        redis::cmd("SET")
                            .arg(name)
                            .arg(token)
                            .arg("NX")
                            .arg("PX")
                            .arg(ms)
                            .query_async(&mut conn)
                            .await
                    })
                    .await?;
                if set.is_none() {
                    return Err(format!("`{name}` is held: nothing taken").into());
                }
                let _: i64 = self
                    .run(|mut conn, _| async move {
                        redis::cmd("DEL").arg(name).query_async(&mut conn).await
                    })
                    .await?;
                Ok::<(), BoxError>(())
            };
            Some(pair.await)
        })
    }
}
