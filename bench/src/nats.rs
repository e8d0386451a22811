//! Row 16, NATS JetStream KV: the raw floor is the writes distlock's acquisition and release
//! cannot do without — a put of the owner token expecting the key has no revision (0), with
//! the lease as its TTL (`Nats-TTL`), then a delete (`KV-Operation: DEL`, a TTL of one second)
//! expecting the put's revision — published raw on one connection of the bench's own, against
//! the same server, into a bucket of its own created as distlock creates its own (one revision
//! per key, per-message TTLs with markers, the headers-only republish), so the server does the
//! same work. Beside it, the same lock written by hand with async-nats's key-value API
//! (`create_with_ttl`, `delete_expect_revision`), and a raw handoff between clients woken by the
//! bucket's republish.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, context::PublishErrorKind, kv, stream};
use async_nats::{HeaderMap, header};
use distlock::__private::testing::nats_key;

use crate::Error;
use crate::sql::RawPair;

/// Where distlock's buckets republish their writes' headers (`distlock-ev.<bucket>.<key>`).
const EVENTS: &str = "distlock-ev";
/// An owner token as long as distlock's.
const TOKEN: &str = "vm:12345:1795857007586:14558175949166d4e243ddc8cb66402d";
/// distlock's default lease, as a `Nats-TTL`.
const LEASE_TTL: &str = "30s";
/// A delete's own TTL, as distlock's (its marker goes by itself).
const MARKER_TTL: &str = "1s";

/// A connection of the bench's own to the server on `port`.
pub async fn connect(port: u16) -> Result<async_nats::Client, Error> {
    Ok(async_nats::connect(format!("127.0.0.1:{port}")).await?)
}

/// The bucket `bucket`, created with distlock's settings (lock-runtime's
/// `backend/nats/connect.rs`): one revision per key, per-key TTLs with markers of one second,
/// and the headers-only republish of every write to `distlock-ev.<bucket>.>`.
async fn bucket(js: &jetstream::Context, bucket: &str) -> Result<kv::Store, Error> {
    Ok(js
        .create_key_value(kv::Config {
            bucket: bucket.to_owned(),
            description: "distlock's benchmark".into(),
            history: 1,
            num_replicas: 1,
            limit_markers: Some(Duration::from_secs(1)),
            republish: Some(stream::Republish {
                source: format!("$KV.{bucket}.>"),
                destination: format!("{EVENTS}.{bucket}.>"),
                headers_only: true,
            }),
            ..Default::default()
        })
        .await?)
}

/// A write refused: the key's last revision was not the one expected.
struct Conflict;

/// One raw write to `subject` expecting its last revision to be `expected` (0: none): a put of
/// the token with the lease's TTL, or (`put` false) a delete with a TTL of one second. The
/// write's revision once the server acknowledged it.
async fn write(
    js: &jetstream::Context,
    subject: String,
    expected: u64,
    put: bool,
) -> Result<Result<u64, Conflict>, Error> {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
        expected.to_string().as_str(),
    );
    let payload = match put {
        true => {
            headers.insert(header::NATS_MESSAGE_TTL, LEASE_TTL);
            TOKEN
        }
        false => {
            headers.insert("KV-Operation", "DEL");
            headers.insert(header::NATS_MESSAGE_TTL, MARKER_TTL);
            ""
        }
    };
    let ack = js
        .publish_with_headers(subject, headers, payload.into())
        .await?;
    match ack.await {
        Ok(ack) => Ok(Ok(ack.sequence)),
        Err(error) if error.kind() == PublishErrorKind::WrongLastSequence => Ok(Err(Conflict)),
        Err(error) => Err(error.into()),
    }
}

/// The key's last revision and whether it is free (none, a delete or a marker), read from
/// the stream.
async fn last(stream: &stream::Stream, subject: &str) -> Result<(u64, bool), Error> {
    match stream.get_last_raw_message_by_subject(subject).await {
        Ok(message) => {
            let headers = &message.headers;
            let free = headers.get("KV-Operation").is_some()
                || headers.get(header::NATS_MARKER_REASON).is_some();
            Ok((message.sequence, free))
        }
        Err(error) if error.kind() == stream::LastRawMessageErrorKind::NoMessageFound => {
            Ok((0, true))
        }
        Err(error) => Err(error.into()),
    }
}

/// Raw pairs in the bucket `bench-raw`: the put expecting no revision, the delete expecting the
/// put's. A reused key's delete stays a second: the next put on it expects the delete's
/// revision, remembered here (read from the stream only if it went meanwhile).
#[derive(Clone)]
pub struct NatsRaw {
    js: jetstream::Context,
    stream: stream::Stream,
    bucket: String,
    /// The revision of the delete this side wrote last, for each reused key.
    deleted: Arc<Mutex<HashMap<String, u64>>>,
}

impl NatsRaw {
    /// A connection of its own to the server on `port`, and the bucket `bucket`.
    pub async fn connect(port: u16, bucket_name: &str) -> Result<NatsRaw, Error> {
        let js = jetstream::new(connect(port).await?);
        bucket(&js, bucket_name).await?;
        let stream = js.get_stream(format!("KV_{bucket_name}")).await?;
        Ok(NatsRaw {
            js,
            stream,
            bucket: bucket_name.to_owned(),
            deleted: Arc::default(),
        })
    }

    fn subject(&self, key: &str) -> String {
        format!("$KV.{}.{}", self.bucket, nats_key(key))
    }
}

impl RawPair for NatsRaw {
    async fn pair(&self, _conn: usize, key: &str, fresh: bool) -> Result<(), Error> {
        let subject = self.subject(key);
        let expected = match fresh {
            true => 0,
            false => {
                let deleted = self.deleted.lock().unwrap();
                deleted.get(&subject).copied().unwrap_or(0)
            }
        };
        let granted = match write(&self.js, subject.clone(), expected, true).await? {
            Ok(revision) => revision,
            // The delete remembered went (its second ran out): the key's last revision now.
            Err(Conflict) => {
                let (revision, free) = last(&self.stream, &subject).await?;
                assert!(free, "raw key {key} was taken");
                let put = write(&self.js, subject.clone(), revision, true).await?;
                put.map_err(|Conflict| format!("raw key {key} was taken"))?
            }
        };
        let deleted = write(&self.js, subject.clone(), granted, false)
            .await?
            .map_err(|Conflict| format!("raw key {key}: its put was overwritten"))?;
        if !fresh {
            self.deleted.lock().unwrap().insert(subject, deleted);
        }
        Ok(())
    }
}

/// The same lock written by hand with async-nats's key-value API, in a bucket created as
/// distlock's: `create_with_ttl` (the put expecting no revision, with the lease's TTL; on a
/// key whose delete is still there, it reads the key and updates over the delete — without
/// the TTL), then `delete_expect_revision` (a delete expecting the create's revision, which
/// stays: the API gives it no TTL).
#[derive(Clone)]
pub struct NatsByHand(kv::Store);

impl NatsByHand {
    pub async fn connect(port: u16, bucket_name: &str) -> Result<NatsByHand, Error> {
        let js = jetstream::new(connect(port).await?);
        Ok(NatsByHand(bucket(&js, bucket_name).await?))
    }
}

impl RawPair for NatsByHand {
    async fn pair(&self, _conn: usize, key: &str, _fresh: bool) -> Result<(), Error> {
        let NatsByHand(kv) = self;
        let key = nats_key(key);
        let revision = kv
            .create_with_ttl(&key, TOKEN.into(), Duration::from_secs(30))
            .await?;
        kv.delete_expect_revision(&key, Some(revision)).await?;
        Ok(())
    }
}

/// One client of the raw handoff: a connection, one subscription to the key's republished
/// writes (the key's last revision and whether it is free, from their `Nats-Sequence` and
/// `KV-Operation` / `Nats-Marker-Reason` headers), and one of its tasks at the store at a time
/// (as distlock lets one waiter of a client go to the store).
struct RawWaiter {
    js: jetstream::Context,
    stream: stream::Stream,
    subject: String,
    state: tokio::sync::watch::Sender<(u64, bool)>,
    turn: tokio::sync::Mutex<()>,
    listener: tokio::task::JoinHandle<()>,
}

impl Drop for RawWaiter {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

impl RawWaiter {
    async fn connect(port: u16, bucket_name: &str, key: &str) -> Result<RawWaiter, Error> {
        use futures_util::StreamExt as _;
        let client = connect(port).await?;
        let js = jetstream::new(client.clone());
        let stream = js.get_stream(format!("KV_{bucket_name}")).await?;
        let key = nats_key(key);
        let mut events = client
            .subscribe(format!("{EVENTS}.{bucket_name}.{key}"))
            .await?;
        client.flush().await?;
        let subject = format!("$KV.{bucket_name}.{key}");
        let (state, _) = tokio::sync::watch::channel(last(&stream, &subject).await?);
        let sender = state.clone();
        let listener = tokio::spawn(async move {
            while let Some(event) = events.next().await {
                let Some(headers) = &event.headers else {
                    continue;
                };
                let sequence = headers
                    .get(header::NATS_SEQUENCE)
                    .and_then(|s| s.as_str().parse::<u64>().ok());
                let Some(sequence) = sequence else {
                    continue;
                };
                let free = headers.get("KV-Operation").is_some()
                    || headers.get(header::NATS_MARKER_REASON).is_some();
                sender.send_if_modified(|known| {
                    let newer = sequence > known.0;
                    if newer {
                        *known = (sequence, free);
                    }
                    newer
                });
            }
        });
        Ok(RawWaiter {
            js,
            stream,
            subject,
            state,
            turn: tokio::sync::Mutex::new(()),
            listener,
        })
    }

    /// Takes the key (waiting for a republished delete while another client holds it) and
    /// releases it; when it was granted.
    async fn take_and_release(&self) -> Result<Instant, Error> {
        let _turn = self.turn.lock().await;
        let mut state = self.state.subscribe();
        loop {
            let (revision, free) = *state.borrow_and_update();
            if free {
                let put = write(&self.js, self.subject.clone(), revision, true).await?;
                if let Ok(granted) = put {
                    let at = Instant::now();
                    write(&self.js, self.subject.clone(), granted, false)
                        .await?
                        .map_err(|Conflict| "raw handoff: the grant was overwritten")?;
                    return Ok(at);
                }
            }
            // The next republished write; a republish is at most once, and a delete's own
            // second may run out unseen: after 200 ms without one, read the key.
            let changed = tokio::time::timeout(Duration::from_millis(200), state.changed()).await;
            if changed.is_err() {
                self.state
                    .send_replace(last(&self.stream, &self.subject).await?);
            }
        }
    }
}

/// The raw floor's handoff, shaped like distlock's (`sql::handoff`): 4 clients × 4 tasks on the
/// key `handoff` of the bucket `bucket_name` for `window`, each client woken by the bucket's
/// republish and putting at once over the delete's revision it carries (no read). Grants per
/// second, and the p50 / p99 gap (µs) from one client's release to another's grant.
pub async fn raw_handoff(
    port: u16,
    bucket_name: &str,
    window: Duration,
) -> Result<(f64, f64, f64), Error> {
    let mut tasks = Vec::new();
    for c in 0..4 {
        let waiter = Arc::new(RawWaiter::connect(port, bucket_name, "handoff").await?);
        for _ in 0..4 {
            let waiter = waiter.clone();
            tasks.push((c, move || {
                let waiter = waiter.clone();
                async move { waiter.take_and_release().await }
            }));
        }
    }
    crate::measure::handoff(window, tasks).await
}
