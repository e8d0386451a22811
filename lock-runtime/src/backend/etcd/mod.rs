//! The etcd backend (`etcd://`): etcd's own `concurrency.Mutex` recipe.
//!
//! A lock is the set of keys `<prefix>/<name>/<owner token>`, each attached to an etcd lease
//! and created in a transaction only if absent. The key with the lowest create revision holds
//! the lock; every other key is a waiter that watches only the deletion of the key just
//! before its own, so a release wakes exactly one waiter — the next in line, across all
//! processes: waiters are served in the order they arrived.
//!
//! Liveness is per lease, not per lock: a key lives as long as its lease. Each distinct lease
//! (rounded up to whole seconds, etcd's TTL unit) gets an etcd lease of that TTL, kept alive
//! by a stream of keepalives (see [`lease`]), so a crashed holder's lock is freed one TTL
//! after its last keepalive. One keepalive per lease renews every lock on it.
//!
//! Fencing tokens are the holder key's create revision: etcd's store revision, which strictly
//! increases across the whole cluster (leader changes included). Keys only ever join a queue
//! with a revision above every key in it, and the holder is the lowest, so successive holders
//! have increasing revisions.

#[cfg(feature = "testing")]
pub(crate) mod inspect;
mod lease;
mod proto;
mod rpc;
mod watch;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;
use tonic::{Code, Status};

use self::lease::Lease;
use self::proto::{
    Compare, CompareWith, DeleteRangeRequest, DeleteRangeResponse, KeyValue, PutRequest,
    RangeRequest, RangeResponse, Request, RequestOp, Response, TxnRequest, TxnResponse, path,
};
use self::rpc::Rpc;
use self::watch::{Watch, Watches};
use super::sql::holder_id;
use super::{
    Admin, Attempt, Backend, Capabilities, Hold, Kind, LockSpec, Released, SetAttempt, Transient,
};
use crate::admin::{Entry, glob_match, holder_from_record};
use crate::error::{BoxError, LockError};
use crate::notify::{ReleaseHub, ReleaseSubscription};
use crate::runtime::BoxFuture;

/// The etcd client port when a host names none.
const DEFAULT_PORT: u16 = 2379;
/// Where lock keys live when the URL names no prefix.
const DEFAULT_PREFIX: &str = "distlock";

/// How long a key left behind by an attempt whose reply never came is retried for deletion in
/// the background while etcd does not answer.
const LEFTOVER_SEARCH: Duration = Duration::from_secs(60);

/// What an `etcd://` URL says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EtcdUrl {
    /// `host:port` of each member.
    pub hosts: Vec<String>,
    /// The key prefix, without a trailing `/`.
    pub prefix: String,
}

/// Parses `etcd://h1:2379,h2:2379[/prefix]`.
pub(crate) fn parse_url(url: &str) -> Result<EtcdUrl, LockError> {
    let shown = super::url::redact_url(url);
    let bad = |why: String| LockError::Config(format!("invalid etcd URL `{shown}`: {why}"));
    let rest = url
        .strip_prefix("etcd://")
        .ok_or_else(|| bad("expected `etcd://host:port[,host:port…][/prefix]`".into()))?;
    if let Some((_, query)) = rest.split_once('?') {
        return Err(bad(format!(
            "unknown parameters `{query}` (an etcd URL takes none)"
        )));
    }
    let (hosts, prefix) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash + 1..]),
        None => (rest, ""),
    };
    if hosts.contains('@') {
        return Err(bad(
            "etcd authentication (`user:password@`) is not supported yet; connect to a \
             cluster (or a gRPC proxy) that lets this client in without credentials"
                .into(),
        ));
    }
    let listed = super::url::host_list(hosts, DEFAULT_PORT).map_err(bad)?;
    let prefix = prefix.trim_end_matches('/');
    if prefix.chars().any(char::is_control) {
        return Err(bad(format!(
            "the key prefix {prefix:?} contains control characters"
        )));
    }
    Ok(EtcdUrl {
        hosts: listed,
        prefix: if prefix.is_empty() {
            DEFAULT_PREFIX.to_owned()
        } else {
            prefix.to_owned()
        },
    })
}

/// The part of every key of lock `name` before the owner token: `<name>/`, with `%` and `/`
/// in the name percent-encoded so that one lock's keys never fall inside another's range.
/// What ends a reader's key in a lock's queue (see `EtcdBackend::key_of`).
const READER: &str = "-r";

/// The owner token and the kind of hold it asks for, from a key's last path segment (see
/// `EtcdBackend::key_of`).
pub(crate) fn token_in(segment: &str) -> (&str, Kind) {
    if let Some(token) = segment.strip_suffix(READER) {
        return (token, Kind::Shared);
    }
    if let Some((token, limit)) = segment.rsplit_once("-p")
        && !limit.starts_with('+')
        && let Ok(limit) = limit.parse()
    {
        return (token, Kind::Permits(limit));
    }
    (segment, Kind::Exclusive)
}

/// The kind of hold a queue key asks for.
fn kind_of(kv: &KeyValue) -> Kind {
    let key = std::str::from_utf8(&kv.key).unwrap_or_default();
    token_in(key.rsplit_once('/').map_or(key, |(_, segment)| segment)).1
}

pub(crate) fn queue_of(name: &str) -> String {
    let mut queue = String::with_capacity(name.len() + 1);
    for c in name.chars() {
        match c {
            '%' => queue.push_str("%25"),
            '/' => queue.push_str("%2F"),
            c => queue.push(c),
        }
    }
    queue.push('/');
    queue
}

/// A key this client made: a held lock or a place in a lock's queue.
struct Held {
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

impl Held {
    /// A key this client just created (or found) at `revision` on `lease`.
    fn created(key: Vec<u8>, lease: &Arc<Lease>, revision: i64) -> Held {
        Held {
            key,
            lease: Arc::clone(lease),
            revision,
            written: revision,
            task: None,
        }
    }
}

impl Drop for Held {
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
    hosts: Arc<[String]>,
    connect_timeout: Duration,
    /// Leases by the TTL asked for, in seconds.
    leases: Mutex<HashMap<u64, Arc<Lease>>>,
    /// Held while a lease is being granted, so concurrent acquisitions share one.
    granting: tokio::sync::Mutex<()>,
    /// This client's keys, by owner token.
    keys: Mutex<HashMap<String, Held>>,
    /// The owner tokens of this client's acquisitions in play (see [`super::InPlay`]).
    in_play: super::InPlay,
    /// Per owner token, held while an acquiring transaction is on its way: a release waits
    /// for it, so it never overtakes the transaction that creates the key (etcd serves the
    /// calls of one connection concurrently, in no set order).
    in_flight: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Owner tokens whose acquiring transaction got no answer (a timeout, a dropped
    /// connection): it may still be applied after the token is released — etcd may hold a
    /// request back, while it has no leader say, past the moment this client gave up on it —
    /// so their release keeps watching the key for a while (see [`sweep_later`]).
    ///
    /// [`sweep_later`]: Self::sweep_later
    unanswered: Mutex<std::collections::HashSet<String>>,
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
enum Failure {
    Server(Status),
    Other(BoxError),
}

/// The TTL, in whole seconds, of the lease for locks of `lease`: rounded up, so a lock never
/// outlives its holder by less than its lease.
fn ttl_seconds(lease: Duration) -> u64 {
    lease.as_millis().div_ceil(1000).max(1) as u64
}

impl EtcdBackend {
    /// Connects: parses the URL and grants the lease for the default lease, which tells
    /// whether etcd answers. Fails with an error naming the URL if it cannot within
    /// `connect_timeout`.
    pub(crate) async fn connect(
        url: &str,
        connect_timeout: Duration,
        response_timeout: Duration,
        default_lease: Duration,
    ) -> Result<Arc<dyn Backend>, LockError> {
        let parsed = parse_url(url)?;
        let shown = super::url::redact_url(url);
        let rpc = Rpc::new(&parsed.hosts, connect_timeout)
            .map_err(|why| LockError::Config(format!("invalid etcd URL `{shown}`: {why}")))?;
        let backend = EtcdBackend {
            watches: Arc::new(Watches::new(rpc.clone())),
            rpc,
            prefix: format!("{}/", parsed.prefix),
            shown,
            response_timeout,
            hosts: parsed.hosts.clone().into(),
            connect_timeout,
            leases: Mutex::new(HashMap::new()),
            granting: tokio::sync::Mutex::new(()),
            keys: Mutex::new(HashMap::new()),
            in_play: super::InPlay::default(),
            in_flight: Mutex::new(HashMap::new()),
            unanswered: Mutex::new(std::collections::HashSet::new()),
            hub: ReleaseHub::new(None),
            holder: holder_id(),
        };
        let fail = |source: BoxError| LockError::Backend {
            backend: "etcd",
            op: "connect",
            key: String::new(),
            source,
        };
        match tokio::time::timeout(connect_timeout, backend.lease_for(default_lease)).await {
            Ok(Ok(_)) => Ok(Arc::new(backend)),
            Ok(Err(error)) => {
                let transient = error.downcast_ref::<Transient>().is_some();
                Err(fail(Transient::wrap_if(
                    transient,
                    format!(
                        "cannot reach etcd at {}: {error}; check that the cluster is up and \
                         reachable from here",
                        backend.shown
                    ),
                )))
            }
            Err(_) => Err(fail(Transient::wrap(format!(
                "cannot reach etcd at {} within the connect timeout ({connect_timeout:?}); \
                 check that the cluster is up and reachable from here",
                backend.shown
            )))),
        }
    }

    fn keys(&self) -> MutexGuard<'_, HashMap<String, Held>> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The full key of lock `name`'s queue (`<prefix>/<name>/`), and of `token`'s place in it:
    /// `<queue><token>`, `<queue><token>-r` for a reader, or `<queue><token>-p<n>` for a
    /// permit of a semaphore of `n` (a token ends in hex digits, so the mark can never be read
    /// as part of one).
    fn key_of(&self, name: &str, token: &str, kind: Kind) -> (Vec<u8>, Vec<u8>) {
        let queue = format!("{}{}", self.prefix, queue_of(name));
        let key = match kind {
            Kind::Exclusive => format!("{queue}{token}"),
            Kind::Shared => format!("{queue}{token}{READER}"),
            Kind::Permits(n) => format!("{queue}{token}-p{n}"),
        };
        (queue.into_bytes(), key.into_bytes())
    }

    /// Runs one call, bounded by the response timeout.
    async fn call<T>(
        &self,
        op: &str,
        request: impl std::future::Future<Output = Result<T, Status>>,
    ) -> Result<T, Failure> {
        match tokio::time::timeout(self.response_timeout, request).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(status)) => Err(Failure::Server(status)),
            Err(_) => Err(Failure::Other(Transient::wrap(format!(
                "etcd ({}) did not answer `{op}` within the response timeout ({:?})",
                self.shown, self.response_timeout
            )))),
        }
    }

    /// The error for a failed call: names the operation and the URL, and says whether
    /// waiting may cure it.
    fn failed(&self, op: &str, failure: Failure) -> BoxError {
        match failure {
            Failure::Server(status) => Transient::wrap_if(
                is_transient(&status),
                format!(
                    "etcd `{op}` failed ({}): {} ({:?})",
                    self.shown,
                    status.message(),
                    status.code()
                ),
            ),
            Failure::Other(error) => error,
        }
    }

    /// Gives up `lease` if `failure` says etcd no longer has it.
    fn note_lease_error(&self, lease: &Lease, failure: &Failure) {
        if let Failure::Server(status) = failure
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

    /// The lease for locks of `lease`: a usable one, or a new one.
    async fn lease_for(&self, lease: Duration) -> Result<Arc<Lease>, BoxError> {
        let seconds = ttl_seconds(lease);
        let usable = |leases: &HashMap<u64, Arc<Lease>>| {
            leases
                .get(&seconds)
                .filter(|l| l.is_usable())
                .map(Arc::clone)
        };
        if let Some(lease) = usable(&self.leases.lock().unwrap_or_else(|p| p.into_inner())) {
            return Ok(lease);
        }
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
            Duration::from_secs(granted.ttl as u64),
            sent_at,
            self.shown.clone(),
            lease::revoker(
                Arc::clone(&self.hosts),
                self.connect_timeout,
                self.response_timeout,
                granted.id,
            ),
        ));
        self.leases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(seconds, Arc::clone(&lease));
        Ok(lease)
    }

    /// Runs `token`'s acquiring transaction in a task of its own, so it completes even if
    /// the caller gives up, and a release of the token can wait for it.
    async fn txn(&self, token: &str, txn: TxnRequest) -> Result<TxnResponse, Failure> {
        self.txn_of(&[token], txn).await
    }

    /// [`txn`](Self::txn) for the acquiring transaction of several tokens (a set of keys): a
    /// release of any of them waits for it.
    async fn txn_of(&self, tokens: &[&str], txn: TxnRequest) -> Result<TxnResponse, Failure> {
        let gates: Vec<_> = {
            let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
            tokens
                .iter()
                .map(|token| Arc::clone(in_flight.entry((*token).to_owned()).or_default()))
                .collect()
        };
        let mut running = Vec::with_capacity(gates.len());
        for gate in gates {
            running.push(gate.lock_owned().await);
        }
        let rpc = self.rpc.clone();
        let bound = self.response_timeout;
        let task = tokio::spawn(async move {
            let _running = running;
            match tokio::time::timeout(bound, rpc.unary(path::TXN, txn)).await {
                Ok(answer) => answer,
                Err(_) => Err(Status::deadline_exceeded(
                    "no answer within the response timeout",
                )),
            }
        });
        let answer = async {
            task.await
                .unwrap_or_else(|e| Err(Status::cancelled(format!("the call was stopped: {e}"))))
        };
        let answer = self.call("acquire", answer).await;
        let refused = |status: &Status| !is_transient(status) || status.code() == Code::NotFound;
        if let Err(failure) = &answer
            && !matches!(failure, Failure::Server(status) if refused(status))
        {
            let mut unanswered = self.unanswered.lock().unwrap_or_else(|p| p.into_inner());
            unanswered.extend(tokens.iter().map(|token| (*token).to_owned()));
        }
        answer
    }

    async fn delete_key(&self, key: Vec<u8>) -> Result<bool, Failure> {
        let deleted: DeleteRangeResponse = self
            .call(
                "delete",
                self.rpc.unary(
                    path::DELETE_RANGE,
                    DeleteRangeRequest {
                        key,
                        range_end: Vec::new(),
                    },
                ),
            )
            .await?;
        Ok(deleted.deleted > 0)
    }

    /// What a queue key holds: who made it, with which lease, since when.
    fn value_of(&self, spec: LockSpec<'_>) -> String {
        format!(
            "holder={}\nlease_ms={}\nrenew={}\njoined_unix_ms={}\n",
            self.holder,
            spec.lease.as_millis(),
            spec.renew,
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis()
        )
    }

    async fn acquire(&self, spec: LockSpec<'_>) -> Result<Attempt, BoxError> {
        let started = Instant::now();
        let lease = self.lease_for(spec.lease).await?;
        let (queue, key) = self.key_of(spec.name, spec.token, spec.kind);
        let queue_end = proto::prefix_end(&queue);
        // The head of the queue: its first key — or, for a semaphore of `n`, its first `n + 1`
        // (the holders, and the first waiter).
        let head_len = spec.kind.permits().map_or(1, |n| i64::from(n) + 1);
        let head = || {
            op(Request::Range(RangeRequest {
                key: queue.clone(),
                range_end: queue_end.clone(),
                limit: head_len,
                sort_order: proto::ASCEND,
                sort_target: proto::SORT_BY_CREATE,
                keys_only: true,
                ..Default::default()
            }))
        };
        let value = self.value_of(spec);
        for _ in 0..8 {
            // Our key, made now if absent (a waiter keeps its place between attempts), and
            // the head of the queue, in one transaction.
            let txn = TxnRequest {
                compare: vec![Compare {
                    result: proto::EQUAL,
                    target: proto::COMPARE_CREATE,
                    key: key.clone(),
                    target_union: Some(CompareWith::CreateRevision(0)),
                    range_end: Vec::new(),
                }],
                success: vec![
                    op(Request::Put(PutRequest {
                        key: key.clone(),
                        value: value.clone().into_bytes(),
                        lease: lease.id,
                    })),
                    head(),
                ],
                failure: vec![
                    op(Request::Range(RangeRequest {
                        key: key.clone(),
                        ..Default::default()
                    })),
                    head(),
                ],
            };
            let answer = match self.txn(spec.token, txn).await {
                Ok(answer) => answer,
                Err(failure) => {
                    self.note_lease_error(&lease, &failure);
                    return Err(self.failed("acquire", failure));
                }
            };
            let revision = answer.header.as_ref().map_or(0, |h| h.revision);
            let mut ranges = answer.responses.into_iter().map(|r| match r.response {
                Some(Response::Range(range)) => range.kvs,
                _ => Vec::new(),
            });
            let mine = ranges.next().unwrap_or_default();
            let first = ranges.next().unwrap_or_default();
            let (created, on_lease) = if answer.succeeded {
                (revision, lease.id)
            } else {
                match mine.first() {
                    Some(kv) => (kv.create_revision, kv.lease),
                    None => continue,
                }
            };
            if on_lease != lease.id {
                // Left by an earlier attempt on a lease this client has given up: its place
                // dies with that lease; take a new one on the live lease.
                let _ = self.delete_key(key.clone()).await;
                self.keys().remove(spec.token);
                continue;
            }
            {
                // Recorded anew unless this very key (same revision, same lease) is known: an
                // earlier attempt's record may belong to a key that died with a lost lease.
                let mut keys = self.keys();
                let known = keys.get(spec.token).is_some_and(|held| {
                    held.revision == created && Arc::ptr_eq(&held.lease, &lease)
                });
                if !known {
                    keys.insert(
                        spec.token.to_owned(),
                        Held::created(key.clone(), &lease, created),
                    );
                }
            }
            // A name is one kind, and a semaphore has one limit: the oldest key says which.
            if let Some(head) = first.first()
                && head.create_revision != created
                && let Some(refused) = super::Refused::between(kind_of(head), spec.kind)
            {
                self.keys().remove(spec.token);
                let _ = self.delete_key(key.clone()).await;
                return Err(refused);
            }
            if let Kind::Permits(limit) = spec.kind {
                let place = first.iter().position(|kv| kv.create_revision == created);
                return self
                    .await_permit(
                        spec,
                        limit,
                        &lease,
                        (&queue, &key),
                        started,
                        created,
                        place,
                        first.len(),
                    )
                    .await;
            }
            if first.first().map(|kv| kv.create_revision) == Some(created) {
                return self.granted(spec, &lease, &key, started, created);
            }
            // Watch only the key that holds us up: its deletion makes us a holder or moves us
            // up (it gave up), so a release wakes only those it may admit. A writer waits for
            // the key just before its own; a reader (Curator's recipe, on create revisions)
            // only for the last writer's before its own — so a waiting writer also holds back
            // every reader after it, and readers cannot starve writers.
            let shared = spec.kind == Kind::Shared;
            let before: RangeResponse = match self
                .call(
                    "range",
                    self.rpc.unary(
                        path::RANGE,
                        RangeRequest {
                            key: queue.clone(),
                            range_end: queue_end.clone(),
                            limit: if shared { 0 } else { 1 },
                            sort_order: proto::DESCEND,
                            sort_target: proto::SORT_BY_CREATE,
                            keys_only: true,
                            max_create_revision: created - 1,
                        },
                    ),
                )
                .await
            {
                Ok(before) => before,
                Err(failure) => return Err(self.failed("range", failure)),
            };
            let is_reader = |kv: &KeyValue| kind_of(kv) == Kind::Shared;
            if before.kvs.is_empty() && !shared {
                continue; // the queue moved: look again
            }
            let predecessor = if shared {
                before.kvs.into_iter().find(|kv| !is_reader(kv))
            } else {
                before.kvs.into_iter().next()
            };
            let Some(predecessor) = predecessor else {
                // Only readers ahead of this reader: it holds the key with them.
                return self.granted(spec, &lease, &key, started, created);
            };
            // A key on our own lease that no acquisition of ours knows: an attempt given up (its
            // reply lost, a leader change, a restart) whose put landed all the same. Nobody
            // would ever delete it while the lease lives: it goes now.
            let orphan = predecessor.lease == lease.id && {
                let segment = predecessor.key.get(queue.len()..).unwrap_or_default();
                let (token, _) = token_in(std::str::from_utf8(segment).unwrap_or_default());
                !self.in_play.contains(token)
            };
            if orphan {
                match self.delete_key(predecessor.key).await {
                    Ok(_) => {
                        tracing::debug!("distlock: etcd: deleted an orphaned key of this lease");
                        continue;
                    }
                    Err(failure) => return Err(self.failed("delete", failure)),
                }
            }
            let task = tokio::spawn(watch_delete(
                self.rpc.clone(),
                Arc::clone(&self.watches),
                predecessor.key,
                Arc::clone(&self.hub),
                spec.token.to_owned(),
            ))
            .abort_handle();
            self.keep_task(spec.token, task);
            return Ok(Attempt::Busy {
                ttl: Some(lease.ttl),
            });
        }
        Err(Transient::wrap(format!(
            "the queue of `{}` kept changing under this waiter ({})",
            spec.name, self.shown
        )))
    }

    /// Several plain locks in one transaction: if every lock's queue is empty (a range compare
    /// of `CREATE == 0` holds for an empty range), a key for each is put on the lease — all
    /// created at one revision, each lock's fencing token; otherwise nothing is written and
    /// the first lock whose queue has a key is busy. Each spec has a token of its own, recorded
    /// as its own key (released, checked and watched alone).
    async fn acquire_set(&self, specs: &[LockSpec<'_>]) -> Result<SetAttempt, BoxError> {
        let Some(first) = specs.first().copied() else {
            return Ok(SetAttempt::Acquired {
                fencing_tokens: Vec::new(),
            });
        };
        let started = Instant::now();
        let lease = self.lease_for(first.lease).await?;
        let keys: Vec<(Vec<u8>, Vec<u8>)> = specs
            .iter()
            .map(|spec| self.key_of(spec.name, spec.token, spec.kind))
            .collect();
        let value = self.value_of(first).into_bytes();
        let txn = TxnRequest {
            compare: keys
                .iter()
                .map(|(queue, _)| Compare {
                    result: proto::EQUAL,
                    target: proto::COMPARE_CREATE,
                    key: queue.clone(),
                    range_end: proto::prefix_end(queue),
                    target_union: Some(CompareWith::CreateRevision(0)),
                })
                .collect(),
            success: keys
                .iter()
                .map(|(_, key)| {
                    op(Request::Put(PutRequest {
                        key: key.clone(),
                        value: value.clone(),
                        lease: lease.id,
                    }))
                })
                .collect(),
            failure: keys
                .iter()
                .map(|(queue, _)| {
                    op(Request::Range(RangeRequest {
                        key: queue.clone(),
                        range_end: proto::prefix_end(queue),
                        limit: 1,
                        keys_only: true,
                        ..Default::default()
                    }))
                })
                .collect(),
        };
        let tokens: Vec<&str> = specs.iter().map(|spec| spec.token).collect();
        let answer = match self.txn_of(&tokens, txn).await {
            Ok(answer) => answer,
            Err(failure) => {
                self.note_lease_error(&lease, &failure);
                return Err(self.failed("acquire", failure));
            }
        };
        if !answer.succeeded {
            // Nothing was written (`try_acquire_all` is done with the tokens).
            let index = answer
                .responses
                .iter()
                .position(|r| matches!(&r.response, Some(Response::Range(range)) if !range.kvs.is_empty()))
                .unwrap_or(0);
            return Ok(SetAttempt::Busy { index });
        }
        let created = answer.header.as_ref().map_or(0, |h| h.revision);
        {
            let mut held = self.keys();
            for (spec, (_, key)) in specs.iter().zip(&keys) {
                held.insert(
                    spec.token.to_owned(),
                    Held::created(key.clone(), &lease, created),
                );
            }
        }
        let mut fencing_tokens = Vec::with_capacity(specs.len());
        for (spec, (_, key)) in specs.iter().zip(&keys) {
            match self.granted(*spec, &lease, key, started, created)? {
                Attempt::Acquired { fencing_token } => fencing_tokens.push(fencing_token),
                Attempt::Busy { .. } => unreachable!("`granted` grants or fails"),
            }
        }
        Ok(SetAttempt::Acquired { fencing_tokens })
    }

    /// A permit of a semaphore of `limit` whose key `key` in `queue` was created at `created`,
    /// at `place` among the first `seen` keys of the queue (at most `limit + 1`; `None`: further
    /// back): granted if fewer than `limit` keys are before it — decided with the attempt's own
    /// transaction, so that a key is never admitted behind the back of a waiter that saw it
    /// waiting. Otherwise the first waiter (at `limit`) watches the queue for a departure, and
    /// every later one the key just before its own — which wakes it by leaving or, admitted
    /// after waiting, by writing its own key once: each departure wakes one waiter, in arrival
    /// order.
    #[allow(clippy::too_many_arguments)]
    async fn await_permit(
        &self,
        spec: LockSpec<'_>,
        limit: u16,
        lease: &Arc<Lease>,
        (queue, key): (&[u8], &[u8]),
        started: Instant,
        created: i64,
        place: Option<usize>,
        seen: usize,
    ) -> Result<Attempt, BoxError> {
        let queue_end = proto::prefix_end(queue);
        if let Some(place) = place
            && place < limit as usize
        {
            // A key after this one, in line when this attempt ran, may watch it as waiting:
            // wake it (a key made later saw this one admitted).
            if place + 1 < seen {
                let touched: Result<proto::PutResponse, _> = self
                    .call(
                        "put",
                        self.rpc.unary(
                            path::PUT,
                            PutRequest {
                                key: key.to_vec(),
                                value: self.value_of(spec).into_bytes(),
                                lease: lease.id,
                            },
                        ),
                    )
                    .await;
                match touched {
                    Ok(put) => {
                        let at = put.header.as_ref().map_or(0, |h| h.revision);
                        if let Some(held) = self.keys().get_mut(spec.token) {
                            held.written = at;
                        }
                    }
                    Err(failure) => return Err(self.failed("put", failure)),
                }
            }
            return self.granted(spec, lease, key, started, created);
        }
        if place == Some(limit as usize) {
            return Ok(self.wait_for_permit(
                spec,
                lease,
                PermitWatch::Departure {
                    queue: queue.to_vec(),
                    queue_end,
                    created,
                    limit,
                },
            ));
        }
        let before: RangeResponse = self
            .call(
                "range",
                self.rpc.unary(
                    path::RANGE,
                    RangeRequest {
                        key: queue.to_vec(),
                        range_end: queue_end.clone(),
                        // Enough to tell fewer than `limit`, exactly `limit` and more ahead
                        // (etcd's `count` is taken before the revision filter: no use here).
                        limit: i64::from(limit) + 1,
                        sort_order: proto::DESCEND,
                        sort_target: proto::SORT_BY_CREATE,
                        keys_only: true,
                        max_create_revision: created - 1,
                    },
                ),
            )
            .await
            .map_err(|f| self.failed("range", f))?;
        // Further back: the key just before this one, unless the queue moved meanwhile.
        let ahead = before.kvs.len() as u64;
        if ahead <= u64::from(limit) {
            return Ok(Attempt::Busy {
                ttl: Some(Duration::ZERO),
            });
        }
        let Some(predecessor) = before.kvs.into_iter().next() else {
            return Ok(Attempt::Busy {
                ttl: Some(Duration::ZERO),
            });
        };
        if predecessor.mod_revision != predecessor.create_revision {
            // Written since its creation: admitted already, so this one may be first in line.
            return Ok(Attempt::Busy {
                ttl: Some(Duration::ZERO),
            });
        }
        Ok(self.wait_for_permit(
            spec,
            lease,
            PermitWatch::Change {
                key: predecessor.key,
            },
        ))
    }

    /// Keeps `task` (a waiter's watch) with the key of `token`, replacing (and stopping) the
    /// one before; stops it at once if the key is not this client's any more.
    fn keep_task(&self, token: &str, task: AbortHandle) {
        if let Some(held) = self.keys().get_mut(token) {
            if let Some(previous) = held.task.replace(task) {
                previous.abort();
            }
        } else {
            task.abort();
        }
    }

    /// A permit's waiter is busy: woken once `watch` sees what it waits for.
    fn wait_for_permit(&self, spec: LockSpec<'_>, lease: &Lease, watch: PermitWatch) -> Attempt {
        let (rpc, watches, hub, token) = (
            self.rpc.clone(),
            Arc::clone(&self.watches),
            Arc::clone(&self.hub),
            spec.token.to_owned(),
        );
        let task = tokio::spawn(async move {
            // Woken by the watch, or at once if a look after it was set up shows the change
            // happened already, or by a failed watch (the waiter looks again).
            let _ = watch.wait(&rpc, &watches).await;
            hub.notify(&token);
        })
        .abort_handle();
        self.keep_task(spec.token, task);
        Attempt::Busy {
            ttl: Some(lease.ttl),
        }
    }

    /// The lock is `spec`'s (its key, created at revision `created`, heads the queue or has only
    /// readers before it): granted, unless its lease was lost meanwhile.
    fn granted(
        &self,
        spec: LockSpec<'_>,
        lease: &Lease,
        key: &[u8],
        started: Instant,
        created: i64,
    ) -> Result<Attempt, BoxError> {
        if !lease.is_usable() {
            return Err(Transient::wrap(format!(
                "the etcd lease of `{}` was lost as it was granted ({})",
                spec.name, self.shown
            )));
        }
        if !spec.renew {
            self.end_after_lease(spec, key, started);
        }
        Ok(Attempt::Acquired {
            fencing_token: spec.fencing.then_some(created as u64),
        })
    }

    /// An unrenewed lock ends after its lease: its key is deleted then, whatever its lease.
    fn end_after_lease(&self, spec: LockSpec<'_>, key: &[u8], started: Instant) {
        let rpc = self.rpc.clone();
        let key = key.to_vec();
        let end = started + spec.lease;
        let task = tokio::spawn(async move {
            tokio::time::sleep_until(end).await;
            for attempt in 1..=3 {
                if delete_within(&rpc, &key, Duration::from_secs(2))
                    .await
                    .is_some()
                {
                    return;
                }
                tokio::time::sleep(super::retry_pause(attempt)).await;
            }
        })
        .abort_handle();
        if let Some(held) = self.keys().get_mut(spec.token) {
            held.task = Some(task);
        }
    }

    async fn release_key(&self, name: &str, token: &str, kind: Kind) -> Result<Released, BoxError> {
        // Waits for the token's acquiring transaction, if one was sent: a release must not run
        // before it (the key it puts would be left behind). The gate stays until it is passed,
        // so that a second release of the same token (a cancelled acquisition's, and its place
        // in line's) waits for the transaction too.
        let gate = self
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(token)
            .cloned();
        if let Some(gate) = gate {
            let _done = gate.lock().await;
            let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
            if in_flight.get(token).is_some_and(|g| Arc::ptr_eq(g, &gate)) {
                in_flight.remove(token);
            }
        }
        let held = self.keys().remove(token);
        let unanswered = self
            .unanswered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(token);
        let released = self.delete_held(name, token, kind, held).await;
        if unanswered && released.is_ok() {
            // Gone now, or never there: an acquiring transaction still held back by etcd
            // could put it after all, on a lease this client keeps alive.
            self.sweep_later(self.key_of(name, token, kind).1);
        }
        released
    }

    /// Deletes `token`'s key (what [`release_key`](Self::release_key) releases).
    async fn delete_held(
        &self,
        name: &str,
        token: &str,
        kind: Kind,
        held: Option<Held>,
    ) -> Result<Released, BoxError> {
        let (key, lease) = match held {
            Some(mut held) => (std::mem::take(&mut held.key), Some(Arc::clone(&held.lease))),
            // An attempt whose reply never came: its key is known from the token.
            None => (self.key_of(name, token, kind).1, None),
        };
        // A key on a lease this client has given up was not held any more, deleted or not.
        let alive = lease.as_ref().is_none_or(|lease| lease.is_usable());
        // A release that fails is retried briefly: a leader election or a member going away
        // fails a call, and a lock left behind holds up everyone until its lease runs out.
        let mut attempt = 0;
        loop {
            match self.delete_key(key.clone()).await {
                Ok(true) if alive => return Ok(Released::Deleted),
                Ok(true) => return Ok(Released::NotOurs),
                // An earlier try may have deleted it (its reply lost in a leader change).
                Ok(false) if attempt > 0 && alive => {
                    return Ok(Released::Ambiguous {
                        alive_until: lease.and_then(|lease| lease.loss.alive_until()),
                    });
                }
                Ok(false) => return Ok(Released::NotOurs),
                Err(Failure::Server(status)) if is_transient(&status) && attempt < 3 => {}
                Err(Failure::Other(_)) if attempt < 3 => {}
                Err(failure) => {
                    match lease {
                        Some(lease) if lease.is_usable() => {
                            self.delete_later(key, move || lease.is_usable());
                        }
                        Some(_) => {}
                        // An attempt whose reply never came: its put may have landed all the
                        // same, on a lease this client keeps alive.
                        None => {
                            let give_up = Instant::now() + LEFTOVER_SEARCH;
                            self.delete_later(key, move || Instant::now() < give_up);
                        }
                    }
                    return Err(self.failed("delete", failure));
                }
            }
            attempt += 1;
            tokio::time::sleep(super::retry_pause(attempt)).await;
        }
    }

    /// Watches the key of a released token whose acquiring transaction got no answer, for
    /// [`LEFTOVER_SEARCH`], and deletes it if that transaction puts it after all (a token is
    /// never used again once released, so whatever appears under its key is that late put).
    fn sweep_later(&self, key: Vec<u8>) {
        let (rpc, watches) = (self.rpc.clone(), Arc::clone(&self.watches));
        let response_timeout = self.response_timeout;
        tokio::spawn(async move {
            let until = Instant::now() + LEFTOVER_SEARCH;
            while Instant::now() < until {
                let mut watch = watches.open(key.clone(), Vec::new(), 0, vec![proto::NODELETE]);
                // Each answer is a put, or the created reply — then a delete finds a put made
                // before the watch began. A failed watch is set again after a pause.
                let watching = async {
                    while next_answer(&mut watch).await.is_ok() {
                        if delete_within(&rpc, &key, response_timeout).await == Some(true) {
                            tracing::debug!("distlock: etcd: a late acquisition's key deleted");
                        }
                    }
                };
                if tokio::time::timeout_at(until, watching).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }

    /// A release that failed for good reports its error, but its key must not outlive it: the
    /// lease it lives on is kept alive for the client's other locks, so the key would hold the
    /// lock for as long as the client runs. It is deleted in the background once etcd answers
    /// again (the server restarted, the leader elected), while `go_on` says so (its lease is
    /// usable; for an attempt whose reply never came, for [`LEFTOVER_SEARCH`]).
    fn delete_later(&self, key: Vec<u8>, go_on: impl Fn() -> bool + Send + 'static) {
        let rpc = self.rpc.clone();
        let response_timeout = self.response_timeout;
        tokio::spawn(async move {
            let mut attempt = 0;
            while go_on() {
                attempt += 1;
                tokio::time::sleep(super::retry_pause(attempt.min(4))).await;
                if delete_within(&rpc, &key, response_timeout).await.is_some() {
                    tracing::debug!("distlock: etcd: a failed release's key deleted later");
                    return;
                }
            }
        });
    }

    async fn check(&self, spec: LockSpec<'_>) -> Result<bool, BoxError> {
        let known = self
            .keys()
            .get(spec.token)
            .map(|held| (held.key.clone(), Arc::clone(&held.lease), held.revision));
        let Some((key, lease, revision)) = known else {
            return Ok(false);
        };
        let found: RangeResponse = self
            .call(
                "range",
                self.rpc.unary(
                    path::RANGE,
                    RangeRequest {
                        key,
                        ..Default::default()
                    },
                ),
            )
            .await
            .map_err(|failure| self.failed("range", failure))?;
        Ok(lease.is_usable()
            && found
                .kvs
                .first()
                .is_some_and(|kv| kv.create_revision == revision && kv.lease == lease.id))
    }

    async fn watch_lost(&self, spec: LockSpec<'_>) -> String {
        let known = self
            .keys()
            .get(spec.token)
            .map(|held| (held.key.clone(), Arc::clone(&held.lease), held.written));
        let Some((key, lease, revision)) = known else {
            // Released already: the watchdog's first poll can run on another thread while
            // the guard releases. Nothing to report.
            return std::future::pending().await;
        };
        // Whether this client still counts the key as its own (not released meanwhile).
        let ours = || self.keys().contains_key(spec.token);
        let shown_key = String::from_utf8_lossy(&key).into_owned();
        let watched = async {
            loop {
                let why = match watch_held(&self.rpc, &self.watches, key.clone(), revision).await {
                    Ok(Change::Deleted) => Some(format!("its key `{shown_key}` was deleted")),
                    Ok(Change::Put) => Some(format!(
                        "its key `{shown_key}` was changed by another client"
                    )),
                    // The keepalive bounds how long this may go on.
                    Err(_) => None,
                };
                match why {
                    Some(why) if ours() => return why,
                    // Deleted by this client's own release: nothing was lost.
                    Some(_) => return std::future::pending().await,
                    None => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        };
        tokio::select! {
            why = lease.loss.wait() => why,
            why = watched => why,
        }
    }
}

/// Deletes `key` from a task of its own (no `&EtcdBackend` there): `Some(deleted)` if etcd
/// answered within `bound`.
async fn delete_within(rpc: &Rpc, key: &[u8], bound: Duration) -> Option<bool> {
    let delete = rpc.unary::<_, DeleteRangeResponse>(
        path::DELETE_RANGE,
        DeleteRangeRequest {
            key: key.to_vec(),
            range_end: Vec::new(),
        },
    );
    match tokio::time::timeout(bound, delete).await {
        Ok(Ok(gone)) => Some(gone.deleted > 0),
        _ => None,
    }
}

fn op(request: Request) -> RequestOp {
    RequestOp {
        request: Some(request),
    }
}

/// What a permit's waiter waits for (see `EtcdBackend::await_permit`).
enum PermitWatch {
    /// The first waiter: a key before its own (created at `created`) leaving the queue, so
    /// that fewer than `limit` are ahead.
    Departure {
        queue: Vec<u8>,
        queue_end: Vec<u8>,
        created: i64,
        limit: u16,
    },
    /// A later waiter: the key before its own written (admitted, its holder writes it once:
    /// a queue key is written at its creation and at most once more) or leaving.
    Change { key: Vec<u8> },
}

impl PermitWatch {
    /// Returns once what it waits for happened. The watch starts at the current revision (a
    /// watch from a past revision may be served by etcd's catch-up loop, up to 100 ms late),
    /// and a look once it is set up catches what happened before.
    async fn wait(self, rpc: &Rpc, watches: &Watches) -> Result<(), Status> {
        let (key, range_end, filters) = match &self {
            PermitWatch::Departure {
                queue, queue_end, ..
            } => (queue.clone(), queue_end.clone(), vec![proto::NOPUT]),
            PermitWatch::Change { key, .. } => (key.clone(), Vec::new(), Vec::new()),
        };
        let mut events = watches.open(key, range_end, 0, filters);
        loop {
            let answer = next_answer(&mut events).await?;
            if !answer.events.is_empty() {
                return Ok(());
            }
            if answer.created && self.happened(rpc).await? {
                return Ok(());
            }
        }
    }

    /// Whether it happened already.
    async fn happened(&self, rpc: &Rpc) -> Result<bool, Status> {
        let (request, limit) = match self {
            PermitWatch::Departure {
                queue,
                queue_end,
                created,
                limit,
            } => (
                RangeRequest {
                    key: queue.clone(),
                    range_end: queue_end.clone(),
                    limit: i64::from(*limit),
                    keys_only: true,
                    max_create_revision: created - 1,
                    sort_order: proto::ASCEND,
                    sort_target: proto::SORT_BY_CREATE,
                },
                Some(*limit),
            ),
            PermitWatch::Change { key, .. } => (
                RangeRequest {
                    key: key.clone(),
                    keys_only: true,
                    ..Default::default()
                },
                None,
            ),
        };
        let now: RangeResponse = rpc.unary(path::RANGE, request).await?;
        Ok(match (self, limit) {
            (PermitWatch::Departure { .. }, Some(limit)) => {
                (now.kvs.len() as u64) < u64::from(limit)
            }
            (PermitWatch::Change { .. }, _) => now
                .kvs
                .first()
                .is_none_or(|kv| kv.mod_revision != kv.create_revision),
            _ => true,
        })
    }
}

/// What happened to a watched key.
enum Change {
    Deleted,
    Put,
}

/// Waits for the deletion of `key` (a waiter's predecessor).
///
/// The watch starts from the present, not from a past revision: etcd serves a watch that
/// starts in the past from a catch-up loop that runs every 100 ms, and the waiter would wake
/// up to 100 ms late. Once the watch is in place the key is read once, so a deletion between
/// the caller's last look and the watch's start is not missed.
///
/// etcd (3.4) reads the store's revision for a watch "from now" just before registering it;
/// a write in between leaves the watch behind, in the catch-up loop. The created reply carries
/// the revision it read: when the read that follows sees a later one, the watch may be behind,
/// and it is made again (a few times; after that, the catch-up loop delivers within 100 ms).
async fn watch_deletion(rpc: &Rpc, watches: &Watches, key: Vec<u8>) -> Result<(), Status> {
    let mut attempts = 0;
    'watch: loop {
        attempts += 1;
        let mut events = watches.open(key.clone(), Vec::new(), 0, Vec::new());
        let mut checked = false;
        loop {
            let answer = next_answer(&mut events).await?;
            if answer.events.iter().any(|e| e.r#type == proto::DELETE) {
                return Ok(());
            }
            if answer.created && !checked {
                checked = true;
                let now: RangeResponse = rpc
                    .unary(
                        path::RANGE,
                        RangeRequest {
                            key: key.clone(),
                            keys_only: true,
                            ..Default::default()
                        },
                    )
                    .await?;
                if now.kvs.is_empty() {
                    return Ok(());
                }
                let read_at = |header: &Option<proto::ResponseHeader>| {
                    header.as_ref().map_or(0, |h| h.revision)
                };
                if read_at(&now.header) != read_at(&answer.header) && attempts < 4 {
                    continue 'watch;
                }
            }
        }
    }
}

/// Waits for the first change of a held lock's `key` after its creation at `revision`.
///
/// Watched from the revision after its creation, so nothing since is missed; on a busy
/// cluster etcd may serve such a watch from its catch-up loop, up to 100 ms late, which the
/// holder's lease covers many times over (its loss is found by the keepalive, not by this).
async fn watch_held(
    rpc: &Rpc,
    watches: &Watches,
    key: Vec<u8>,
    revision: i64,
) -> Result<Change, Status> {
    let mut events = watches.open(key.clone(), Vec::new(), revision + 1, Vec::new());
    loop {
        let answer = match next_answer(&mut events).await {
            Ok(answer) => answer,
            // The history since the key's creation was compacted: look at the key itself.
            Err(status) if status.code() == Code::OutOfRange => {
                let now: RangeResponse = rpc
                    .unary(
                        path::RANGE,
                        RangeRequest {
                            key: key.clone(),
                            ..Default::default()
                        },
                    )
                    .await?;
                return match now.kvs.first() {
                    None => Ok(Change::Deleted),
                    Some(kv) if kv.mod_revision != revision => Ok(Change::Put),
                    Some(_) => {
                        let from = now.header.map_or(0, |h| h.revision) + 1;
                        events = watches.open(key.clone(), Vec::new(), from, Vec::new());
                        continue;
                    }
                };
            }
            Err(status) => return Err(status),
        };
        if let Some(event) = answer.events.first() {
            return Ok(if event.r#type == proto::DELETE {
                Change::Deleted
            } else {
                Change::Put
            });
        }
    }
}

/// The next answer on a watch stream; a cancelled watch is an error (`OutOfRange` when its
/// start revision was compacted away).
async fn next_answer(watch: &mut Watch) -> Result<proto::WatchResponse, Status> {
    let answer = watch.answer().await?;
    if answer.canceled {
        return Err(if answer.compact_revision > 0 {
            Status::out_of_range("the watched revisions were compacted")
        } else {
            Status::unavailable(format!("the watch was cancelled: {}", answer.cancel_reason))
        });
    }
    Ok(answer)
}

/// A waiter's watch on the key before its own: wakes the waiter `token` once that key is
/// deleted — or once the watch fails, so the waiter looks again rather than sleeps on.
async fn watch_delete(
    rpc: Rpc,
    watches: Arc<Watches>,
    key: Vec<u8>,
    hub: Arc<ReleaseHub>,
    token: String,
) {
    let _ = watch_deletion(&rpc, &watches, key).await;
    hub.notify(&token);
}

/// Every kind, queued on the server (so fair), kept alive by the client's lease; sets of plain
/// locks in one transaction (readers and permits queue behind the keys before them).
const CAPABILITIES: Capabilities = Capabilities {
    sets: true,
    fair: true,
    queues_waiters: true,
    keeps_alive: true,
    ..Capabilities::every_kind("etcd")
};

impl Backend for EtcdBackend {
    fn capabilities(&self) -> &Capabilities {
        &CAPABILITIES
    }

    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        Box::pin(self.in_play.attempt(spec.token, self.acquire(spec)))
    }

    fn try_acquire_all<'a>(
        &'a self,
        specs: &'a [LockSpec<'a>],
    ) -> BoxFuture<'a, Result<SetAttempt, BoxError>> {
        let tokens: Vec<&str> = specs.iter().map(|spec| spec.token).collect();
        Box::pin(async move {
            let attempt = self
                .in_play
                .attempt_all(&tokens, self.acquire_set(specs))
                .await;
            if let Ok(SetAttempt::Busy { .. }) = attempt {
                // Nothing was written: the tokens are out of play, their gates unneeded.
                self.in_play.forget(&tokens);
                let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
                for token in &tokens {
                    in_flight.remove(*token);
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
        // `guard::keep_until_min_hold`), and the lease is not revoked before then.
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
        let released = self.release_key(name, token, hold.kind);
        Box::pin(self.in_play.release(token, released))
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
}

impl Admin for EtcdBackend {
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move {
            let (queue, _) = self.key_of(name, "", Kind::Exclusive);
            let keys = self.range_prefix(&queue).await?;
            let keys: Vec<&KeyValue> = keys.iter().collect();
            match keys.first() {
                Some(_) => Ok(Some(self.entry(name, &keys).await?)),
                None => Ok(None),
            }
        })
    }
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        pattern: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Entry>, BoxError>> {
        Box::pin(async move {
            // Every key under the prefix, oldest first; grouped by lock: the first of each
            // group holds it.
            let start = self.prefix.clone().into_bytes();
            let keys = self.range_prefix(&start).await?;
            // By lock name (sorted), each queue oldest first.
            let mut queues: std::collections::BTreeMap<String, Vec<&KeyValue>> = Default::default();
            for kv in &keys {
                let Some(rest) = kv.key.strip_prefix(start.as_slice()) else {
                    continue;
                };
                let rest = String::from_utf8_lossy(rest);
                let Some((encoded, _token)) = rest.rsplit_once('/') else {
                    continue;
                };
                let name = encoded.replace("%2F", "/").replace("%25", "%");
                if !name
                    .strip_prefix(prefix)
                    .is_some_and(|key| glob_match(pattern, key))
                {
                    continue;
                }
                queues.entry(name).or_default().push(kv);
            }
            let mut entries = Vec::new();
            for (name, members) in queues.into_iter().take(limit) {
                entries.push(self.entry(&name, &members).await?);
            }
            Ok(entries)
        })
    }
    fn force_release<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move {
            let (queue, _) = self.key_of(name, "", Kind::Exclusive);
            let keys = self.range_prefix(&queue).await?;
            let keys: Vec<&KeyValue> = keys.iter().collect();
            if keys.is_empty() {
                return Ok(None);
            }
            let entry = self.entry(name, &keys).await?;
            // Deleting the holders' keys wakes the next in line (it watches such a key) and
            // tells each holder (it watches its own key too).
            for holder in &keys[..holders(&keys)] {
                let _: DeleteRangeResponse = self
                    .call(
                        "delete",
                        self.rpc.unary(
                            path::DELETE_RANGE,
                            DeleteRangeRequest {
                                key: holder.key.clone(),
                                range_end: Vec::new(),
                            },
                        ),
                    )
                    .await
                    .map_err(|f| self.failed("delete", f))?;
            }
            Ok(Some(entry))
        })
    }
    fn server_version(&self) -> BoxFuture<'_, Result<String, BoxError>> {
        Box::pin(async move {
            let status: proto::StatusResponse = self
                .call(
                    "status",
                    self.rpc.unary(path::STATUS, proto::StatusRequest {}),
                )
                .await
                .map_err(|f| self.failed("status", f))?;
            Ok(format!("etcd {}", status.version))
        })
    }
}

impl EtcdBackend {
    /// Every key starting with `start`, lowest create revision first.
    async fn range_prefix(&self, start: &[u8]) -> Result<Vec<KeyValue>, BoxError> {
        let range: RangeResponse = self
            .call(
                "range",
                self.rpc.unary(
                    path::RANGE,
                    RangeRequest {
                        key: start.to_vec(),
                        range_end: proto::prefix_end(start),
                        sort_order: proto::ASCEND,
                        sort_target: proto::SORT_BY_CREATE,
                        ..Default::default()
                    },
                ),
            )
            .await
            .map_err(|f| self.failed("range", f))?;
        Ok(range.kvs)
    }

    /// The admin view of lock `name` whose queue is `keys` (oldest first): held by the first
    /// key, or by the readers at its head.
    async fn entry(&self, name: &str, keys: &[&KeyValue]) -> Result<Entry, BoxError> {
        let held = holders(keys);
        let waiters = Some((keys.len() - held) as u64);
        let permits = kind_of(keys[0]).permits();
        if permits.is_some() || reader_key(keys[0]) {
            let readers = keys[..held]
                .iter()
                .map(|kv| {
                    let key = String::from_utf8_lossy(&kv.key);
                    let segment = key.rsplit_once('/').map_or("", |(_, s)| s);
                    token_in(segment).0.to_owned()
                })
                .collect();
            return Ok(Entry {
                permits,
                ..Entry::read_by(name, readers, waiters)
            });
        }
        let holder = keys[0];
        let key = String::from_utf8_lossy(&holder.key);
        let value = String::from_utf8_lossy(&holder.value);
        let field = |name: &str| {
            value
                .lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
        };
        let since = field("joined_unix_ms").and_then(|ms| ms.parse().ok());
        let ttl = if holder.lease == 0 {
            None
        } else {
            let left: proto::LeaseTimeToLiveResponse = self
                .call(
                    "lease time-to-live",
                    self.rpc.unary(
                        path::LEASE_TIME_TO_LIVE,
                        proto::LeaseTimeToLiveRequest { id: holder.lease },
                    ),
                )
                .await
                .map_err(|f| self.failed("lease time-to-live", f))?;
            u64::try_from(left.ttl).ok().map(Duration::from_secs)
        };
        Ok(Entry {
            name: name.to_owned(),
            token: key.rsplit_once('/').map(|(_, token)| token.to_owned()),
            holder: holder_from_record(field("holder").unwrap_or_default(), since),
            ttl,
            fencing_token: u64::try_from(holder.create_revision).ok(),
            waiters,
            readers: Vec::new(),
            permits: None,
        })
    }
}

/// Whether a queue key is a reader's (see `EtcdBackend::key_of`).
fn reader_key(kv: &KeyValue) -> bool {
    kind_of(kv) == Kind::Shared
}

/// How many keys at the head of a queue (oldest first) hold the lock: the readers there, a
/// semaphore's first `n`, or the first key.
fn holders(keys: &[&KeyValue]) -> usize {
    match keys.first().map(|first| kind_of(first)) {
        Some(Kind::Shared) => keys.iter().take_while(|kv| reader_key(kv)).count(),
        Some(Kind::Permits(n)) => keys.len().min(n as usize),
        Some(Kind::Exclusive) => 1,
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let url = parse_url("etcd://a:1,b,[::1]:3/app/locks/").unwrap();
        assert_eq!(url.hosts, ["a:1", "b:2379", "[::1]:3"]);
        assert_eq!(url.prefix, "app/locks");
        assert_eq!(parse_url("etcd://a").unwrap().prefix, "distlock");
        for bad in [
            "etcd://",
            "etcd://a:x",
            "etcd://a,,b",
            "etcd://u:p@a",
            "etcd://a?x=1",
            "zk://a",
        ] {
            let err = parse_url(bad).expect_err(bad).to_string();
            assert!(err.contains("invalid etcd URL"), "{bad}: {err}");
        }
    }

    #[test]
    fn names_never_fall_into_another_locks_range() {
        assert_eq!(queue_of("lock:order:42"), "lock:order:42/");
        assert_eq!(queue_of("a/b"), "a%2Fb/");
        assert_eq!(queue_of("a%2Fb"), "a%252Fb/");
        assert!(!queue_of("a/b").starts_with(&queue_of("a")));
    }

    #[test]
    fn ttls_round_up() {
        assert_eq!(ttl_seconds(Duration::from_millis(10)), 1);
        assert_eq!(ttl_seconds(Duration::from_millis(1_000)), 1);
        assert_eq!(ttl_seconds(Duration::from_millis(1_001)), 2);
    }
}
