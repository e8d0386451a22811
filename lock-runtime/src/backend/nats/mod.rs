//! The NATS backend (`nats://`): a lock is one key of a JetStream key-value bucket.
//!
//! The key holds the owner token, with a per-message TTL judged by the server (NATS 2.11+,
//! ADR-43/48): the lease, rounded up to whole seconds (the server truncates `Nats-TTL` to
//! them; its least is one second). Every write is a compare-and-set on the key's last
//! revision (`Nats-Expected-Last-Subject-Sequence`), published raw rather than through the
//! key-value API, whose create-after-delete and update drop the TTL:
//!
//! - acquire: a put expecting the revision the client last heard freed the key (0 for none, or
//!   for a key it never heard of), with the TTL — one round trip (`news`). Refused, or for a
//!   key heard held, the key's last message is read from the stream's leader: absent, a
//!   delete or an expiry marker → a put expecting exactly that revision; a put of another
//!   token is busy, with what is left of its TTL. A put whose answer never came may land
//!   later (a client resends what it could not send once it reconnects): the release of its
//!   token looks for it a while and deletes it (`leftover`);
//! - renew: a put of the same token expecting the revision this client wrote last, with the
//!   TTL again (the TTL restarts; the revision moves on, and is remembered);
//! - release: a delete expecting that revision, itself with a TTL of one second, so that no
//!   marker stays behind.
//!
//! Two writers can never both win: the stream leader refuses every write whose expected
//! revision is not the key's last (error 10071), and a loser reads again.
//!
//! Waiters are woken by the bucket's republish: the stream republishes the headers of every
//! write it accepted — and the marker it writes when a TTL runs out (the bucket's
//! `limit_markers`) — on `distlock-ev.<bucket>.<key>`, which each client follows with one
//! subscription. A core subscription on the key's own subject would see refused writes and
//! miss expiries. The republish is at most once: a waiter that misses one asks again when the
//! holder's TTL ends.
//!
//! Fencing tokens are the revision of the put that granted the lock: the stream's sequence,
//! which rises with every write to the bucket (across keys and server restarts). A renewal
//! carries the grant's revision in a header, so `inspect` reports it. Deleting and creating the
//! bucket again starts the sequence over.
//!
//! Readers' shares, a semaphore's permits, a fair lock's queue, a waiting writer's mark and an
//! upgrade under way are places of one table in the key's value (`table`), rewritten by the
//! same compare-and-set, each place ending by the server's stamps (`table_ops`). A plain lock
//! that finds the key free — or only waiting places of others, which then stay beside it — is
//! granted as above; a plain lock's put finds a table taken, as it finds another token.
//! Waiters of a table are woken by a write that took a place out of it (a `Distlock-Left`
//! header; of a fair lock, naming the oldest waiting place only).

mod admin;
mod connect;
mod leftover;
mod listener;
mod news;
mod plain;
mod share;
mod table;
mod table_ops;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use async_nats::{HeaderMap, header};

use self::connect::Auth;
use self::news::News;
use super::{Attempt, Backend, Capabilities, Hold, Kind, LockSpec, Released, Upgrade};
use crate::error::BoxError;
use crate::fast_map::FastMap;
use crate::notify::{ReleaseHub, ReleaseSubscription};
use crate::runtime::{BoxFuture, Revived, RuntimeBound};

/// What the NATS backend can do: every kind (readers, permits, fair and upgradable locks in
/// the key's table), with fencing tokens, `min_hold` and `lock_delay`.
pub(crate) const CAPABILITIES: Capabilities = Capabilities {
    upgradable: Ok(()),
    fair: true,
    marks_waiting_writers: true,
    queues_readers: true,
    wakes: "a republished delete, expiry marker or departure from the key's table",
    shares: Ok(share::SHARE_LIMIT),
    announces: true,
    ..Capabilities::every_kind("nats")
};

/// The header of a renewal that carries the revision of the put that granted the lock (the
/// fencing token).
const FENCE_HEADER: &str = "Distlock-Fence";
/// The key-value operation of a delete.
const KV_OPERATION: &str = "KV-Operation";
/// Where the bucket republishes its writes' headers: `<EVENTS>.<bucket>.<key>`.
const EVENTS: &str = "distlock-ev";
/// How long a delete marker stays (it then goes by itself: a used key leaves nothing).
const MARKER_TTL: &str = "1s";

/// A NATS server (or cluster) and the bucket its locks live in.
pub(crate) struct NatsBackend {
    /// The URL for messages, password redacted.
    shown: String,
    servers: Vec<String>,
    auth: Auth,
    /// `natss://`: TLS to every server, checked against these roots (with this identity).
    #[cfg(feature = "tls")]
    tls: Option<rustls::ClientConfig>,
    bucket: String,
    replicas: usize,
    connect_timeout: Duration,
    response_timeout: Duration,
    conn: Revived<Conn>,
    listener: Revived<Listener>,
    /// The revision this client wrote last for each lock it holds, by owner token: what its
    /// next renewal or release expects; and the revision that granted it (the fencing token).
    written: Arc<Mutex<FastMap<String, Written>>>,
    /// Acquisitions whose put is on its way, by owner token: a release of that token (the
    /// acquisition cancelled meanwhile) waits for the put's answer before it looks, so that a
    /// put landing after the release's look cannot leave a lock nobody holds.
    in_flight: Arc<Mutex<FastMap<String, tokio::sync::watch::Receiver<bool>>>>,
    /// What this client last heard of keys it asked for (see [`News`]): an acquisition of a key
    /// heard free — or never heard of — puts at once, without reading the key first.
    news: Arc<Mutex<FastMap<String, News>>>,
    /// Tokens whose acquisition's put got no answer (a timeout, a dropped connection): it may
    /// land later — a client resends what it could not send once it reconnects — so their
    /// release looks for it for a while (see `leftover`).
    unanswered: Arc<Mutex<crate::fast_map::FastSet<String>>>,
}

#[derive(Clone, Copy)]
struct Written {
    last: u64,
    granted: u64,
    /// Held as a place of the key's table (`table`), not as its bare token: renewed and
    /// released by rewriting the table as read then, not by expecting `last`.
    table: bool,
}

/// A connection, on the runtime that made it.
struct Conn {
    client: async_nats::Client,
    js: jetstream::Context,
    stream: stream::Stream,
    runtime: RuntimeBound<()>,
}

/// The one subscription to the bucket's republished writes, turned into hub wake-ups.
struct Listener {
    hub: Arc<ReleaseHub>,
    dead: Arc<std::sync::atomic::AtomicBool>,
    runtime: RuntimeBound<()>,
}

/// A key's last message, as an acquisition reads it.
#[derive(Clone)]
struct Last {
    revision: u64,
    /// The holder's token; `None` for a delete, a purge or an expiry marker (free).
    token: Option<String>,
    /// What is left of the holder's TTL, by the server's stamp and this host's clock.
    ttl: Option<Duration>,
    /// The revision that granted the hold (a renewal names it; a grant is its own).
    granted: u64,
    /// The server's stamp of the message, unix ms.
    stamp: u64,
}

/// A write refused because the key's last revision was not the one expected.
struct Conflict;

impl NatsBackend {
    /// The key of backend name `name`: every byte but letters, digits, `-` and `_` written as
    /// `=XX` (a key is `[-/_=.a-zA-Z0-9]`, and `.` separates subject tokens).
    pub(crate) fn key_of(name: &str) -> String {
        let mut key = String::with_capacity(name.len() + 8);
        for byte in name.bytes() {
            if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
                key.push(byte as char);
            } else {
                key.push_str(&format!("={byte:02X}"));
            }
        }
        key
    }

    /// The backend name of key `key` ([`key_of`](Self::key_of) undone).
    fn name_of(key: &str) -> Option<String> {
        crate::url::unescape(key, b'=')
    }

    fn subject(&self, name: &str) -> String {
        format!("$KV.{}.{}", self.bucket, Self::key_of(name))
    }

    /// The key's last message, read from the stream's leader.
    async fn last(&self, conn: &Conn, name: &str) -> Result<Option<Last>, BoxError> {
        last_of(conn, &self.subject(name)).await
    }

    /// Writes `token` (a put) or a delete (`None`) to `name`'s key if its last revision is
    /// `expected` (0: none), with a TTL of `ttl` (whole seconds, at least one).
    async fn write(
        &self,
        conn: &Conn,
        name: &str,
        expected: u64,
        put: Option<(&str, Duration, Option<u64>)>,
    ) -> Result<Result<u64, Conflict>, BoxError> {
        write_to(conn, self.subject(name), Some(expected), put).await
    }
}

/// The last message of `subject` (a key), read from the stream's leader.
async fn last_of(conn: &Conn, subject: &str) -> Result<Option<Last>, BoxError> {
    let read = conn.stream.get_last_raw_message_by_subject(subject).await;
    let message = match read {
        Ok(message) => message,
        Err(error) if error.kind() == stream::LastRawMessageErrorKind::NoMessageFound => {
            return Ok(None);
        }
        Err(error) => return Err(super::Transient::wrap(error)),
    };
    let headers = &message.headers;
    let gone =
        headers.get(KV_OPERATION).is_some() || headers.get(header::NATS_MARKER_REASON).is_some();
    let token = (!gone).then(|| String::from_utf8_lossy(&message.payload).into_owned());
    let ttl = headers
        .get(header::NATS_MESSAGE_TTL)
        .and_then(|ttl| parse_ttl(ttl.as_str()))
        .map(|ttl| {
            let written = Duration::from_nanos(
                u64::try_from(message.time.unix_timestamp_nanos()).unwrap_or(0),
            );
            (written + ttl).saturating_sub(unix_now())
        });
    let granted = headers
        .get(FENCE_HEADER)
        .and_then(|fence| fence.as_str().parse().ok())
        .unwrap_or(message.sequence);
    let stamp = u64::try_from(message.time.unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
    Ok(Some(Last {
        revision: message.sequence,
        token,
        ttl,
        granted,
        stamp,
    }))
}

impl NatsBackend {
    async fn acquire(&self, spec: LockSpec<'_>) -> Result<Attempt, BoxError> {
        let sent_at = tokio::time::Instant::now();
        let conn = self.conn().await.map_err(super::Transient::wrap)?;
        let attempt = self.acquire_once(&conn, spec).await?;
        if let (Attempt::Acquired { .. }, false) = (attempt, spec.renew) {
            // Unrenewed: ended here when its lease does (the store's TTL is whole seconds,
            // longer), by a delete that expects the grant's revision — a renewal, an early
            // `min_hold` end or a release since changed it, and then nothing is deleted.
            if let Some(written) = self.written(spec.token) {
                let subject = self.subject(spec.name);
                let ends = sent_at + spec.lease;
                let (token, all_written) = (spec.token.to_owned(), Arc::clone(&self.written));
                tokio::spawn(async move {
                    tokio::time::sleep_until(ends).await;
                    if !written.table {
                        let _ = write_to(&conn, subject, Some(written.last), None).await;
                        return;
                    }
                    // A place of a table: left unless this client wrote it since (a renewal,
                    // an early end).
                    let since = all_written
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get(&token)
                        .map(|now| now.last);
                    if since == Some(written.last) {
                        let _ = table_ops::leave(&conn, &subject, &token).await;
                    }
                });
            }
        }
        Ok(attempt)
    }
}

/// Publishes to `subject` a put of `token` with the TTL of `lease` (and the grant's revision,
/// for a renewal), or a delete (`None`) that goes by itself after a second; if `expected`,
/// only over that last revision (0: none).
async fn write_to(
    conn: &Conn,
    subject: String,
    expected: Option<u64>,
    put: Option<(&str, Duration, Option<u64>)>,
) -> Result<Result<u64, Conflict>, BoxError> {
    let fence;
    let put = match put {
        Some((token, lease, granted)) => {
            fence = granted.map(|granted| [(FENCE_HEADER, granted.to_string())]);
            Some(Put {
                value: token.as_bytes(),
                lease,
                headers: fence.as_ref().map_or(&[][..], |fence| &fence[..]),
            })
        }
        None => None,
    };
    write_bytes(conn, subject, expected, put).await
}

/// What a put carries: the value, the lease its TTL is (whole seconds, rounded up), and
/// headers more (a renewal's grant revision, a shared result's exact share, a table's news
/// that a place left).
struct Put<'a> {
    value: &'a [u8],
    lease: Duration,
    headers: &'a [(&'static str, String)],
}

async fn write_bytes(
    conn: &Conn,
    subject: String,
    expected: Option<u64>,
    put: Option<Put<'_>>,
) -> Result<Result<u64, Conflict>, BoxError> {
    let mut headers = HeaderMap::new();
    if let Some(expected) = expected {
        headers.insert(
            header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
            expected.to_string().as_str(),
        );
    }
    let payload = match put {
        Some(put) => {
            headers.insert(
                header::NATS_MESSAGE_TTL,
                format!("{}s", ttl_seconds(put.lease)).as_str(),
            );
            for (name, value) in put.headers {
                headers.insert(*name, value.as_str());
            }
            put.value.to_vec()
        }
        None => {
            headers.insert(KV_OPERATION, "DEL");
            headers.insert(header::NATS_MESSAGE_TTL, MARKER_TTL);
            Vec::new()
        }
    };
    let sent = conn
        .js
        .publish_with_headers(subject, headers, payload.into())
        .await
        .map_err(super::Transient::wrap)?;
    match sent.await {
        Ok(ack) => Ok(Ok(ack.sequence)),
        Err(error) if error.kind() == jetstream::context::PublishErrorKind::WrongLastSequence => {
            Ok(Err(Conflict))
        }
        Err(error) => Err(super::Transient::wrap(error)),
    }
}

/// This host's clock, since the epoch.
fn unix_now() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

/// The TTL of a lease: whole seconds (the server truncates `Nats-TTL` to them), rounded up,
/// at least one.
fn ttl_seconds(lease: Duration) -> u64 {
    lease.as_millis().div_ceil(1000).max(1) as u64
}

/// A `Nats-TTL` value: `30s`, `1500ms`, `1m` or whole seconds.
fn parse_ttl(text: &str) -> Option<Duration> {
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    crate::url::parse_duration(text)
}

impl Backend for NatsBackend {
    fn capabilities(&self) -> &Capabilities {
        &CAPABILITIES
    }

    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        Box::pin(self.acquire(spec))
    }

    fn renew<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(self.renew_key(spec))
    }

    fn release<'a>(&'a self, hold: Hold<'a>) -> BoxFuture<'a, Result<Released, BoxError>> {
        Box::pin(self.release_key(hold))
    }

    fn upgrade<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Upgrade, BoxError>> {
        Box::pin(self.upgrade_place(spec))
    }

    fn abandon_upgrade<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        Box::pin(self.abandon_place(spec))
    }

    fn subscribe<'a>(
        &'a self,
        spec: LockSpec<'a>,
    ) -> BoxFuture<'a, Result<ReleaseSubscription, BoxError>> {
        Box::pin(async move {
            let listener = self.listener().await?;
            // A fair lock's waiter is woken by name when it heads the queue (and by deletes).
            let fair = spec.fair.then_some(spec.token);
            Ok(listener.hub.subscribe_as(spec.name, fair, || {}))
        })
    }
}

/// The places of a table's value, for tests (`testing::nats_table`).
#[cfg(feature = "testing")]
pub(crate) fn table_places(
    value: &str,
    stamp: u64,
    revision: u64,
) -> Option<Vec<(String, char, bool, u64)>> {
    let places = table::parse(value, stamp, revision)?;
    Some(
        places
            .into_iter()
            .map(|place| {
                let kind = match place.kind {
                    Kind::Exclusive => 'W',
                    Kind::Shared => 'R',
                    Kind::Permits(_) => 'P',
                };
                let ends = place.ends(stamp);
                (
                    place.token,
                    kind,
                    place.state != table::State::Waiting,
                    ends,
                )
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_are_valid_subject_tokens() {
        for name in ["lock:order:42", "lock:a.b/c d=é", "plain-key_1"] {
            let key = NatsBackend::key_of(name);
            assert!(
                key.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'='),
                "{key}"
            );
            assert_eq!(NatsBackend::name_of(&key).as_deref(), Some(name));
        }
    }

    #[test]
    fn ttls_are_whole_seconds_rounded_up() {
        let ms = Duration::from_millis;
        assert_eq!(ttl_seconds(ms(300)), 1);
        assert_eq!(ttl_seconds(ms(1_000)), 1);
        assert_eq!(ttl_seconds(ms(1_001)), 2);
        assert_eq!(parse_ttl("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_ttl("7"), Some(Duration::from_secs(7)));
    }
}
