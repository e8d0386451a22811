//! The spans and events distlock gives any `tracing` subscriber (`distlock::guide::metrics`):
//! an acquisition span (`distlock.acquire`: key, backend, kind, waited, outcome), a hold span
//! from grant to release (`distlock.hold`: key, fencing token, held duration, how it ended),
//! and WARN events for failed renewals and lost locks — read here through a
//! `tracing-subscriber` layer, as an exporter (OpenTelemetry's, say) reads them.
//!
//! Each test installs its subscriber for its own thread only (`with_default` around a
//! current-thread runtime), so the other tests of this binary do not show up in it.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{LockClient, LockError, distributed_lock};
use support::RedisServer;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A span as a subscriber saw it: its fields as first given and as recorded later.
#[derive(Clone, Debug, Default)]
struct SeenSpan {
    name: String,
    parent: Option<String>,
    fields: HashMap<String, String>,
    closed: bool,
}

#[derive(Clone, Debug)]
struct SeenEvent {
    level: Level,
    fields: HashMap<String, String>,
}

#[derive(Clone, Default)]
struct Seen {
    spans: Arc<Mutex<Vec<(u64, SeenSpan)>>>,
    events: Arc<Mutex<Vec<SeenEvent>>>,
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Seen {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut span = SeenSpan {
            name: attrs.metadata().name().to_owned(),
            ..SeenSpan::default()
        };
        span.parent = ctx
            .span(id)
            .and_then(|s| s.parent())
            .map(|parent| parent.name().to_owned());
        attrs.record(&mut Fields(&mut span.fields));
        self.spans.lock().unwrap().push((id.into_u64(), span));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let mut spans = self.spans.lock().unwrap();
        if let Some((_, span)) = spans.iter_mut().rev().find(|(i, _)| *i == id.into_u64()) {
            values.record(&mut Fields(&mut span.fields));
        }
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        let mut spans = self.spans.lock().unwrap();
        if let Some((_, span)) = spans.iter_mut().rev().find(|(i, _)| *i == id.into_u64()) {
            span.closed = true;
        }
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = HashMap::new();
        event.record(&mut Fields(&mut fields));
        self.events.lock().unwrap().push(SeenEvent {
            level: *event.metadata().level(),
            fields,
        });
    }
}

impl Seen {
    /// The spans named `name` whose `key` is `key`, in creation order.
    fn spans(&self, name: &str, key: &str) -> Vec<SeenSpan> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .map(|(_, span)| span.clone())
            .filter(|span| {
                span.name == name && span.fields.get("key").map(String::as_str) == Some(key)
            })
            .collect()
    }

    fn one(&self, name: &str, key: &str) -> SeenSpan {
        let spans = self.spans(name, key);
        assert_eq!(spans.len(), 1, "one `{name}` span for `{key}`: {spans:#?}");
        spans.into_iter().next().unwrap()
    }

    /// The WARN events whose message contains `says`.
    fn warnings(&self, says: &str) -> Vec<SeenEvent> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|event| event.level == Level::WARN)
            .filter(|event| {
                event
                    .fields
                    .get("message")
                    .is_some_and(|m| m.contains(says))
            })
            .cloned()
            .collect()
    }
}

/// Runs `test` on a current-thread runtime with `seen` as this thread's subscriber.
fn traced<F: std::future::Future<Output = ()>>(seen: &Seen, test: impl FnOnce() -> F) {
    traced_by(tracing_subscriber::registry().with(seen.clone()), test);
}

/// Runs `test` on a current-thread runtime with `subscriber` as this thread's subscriber.
fn traced_by<F: std::future::Future<Output = ()>>(
    subscriber: impl Subscriber + Send + Sync + 'static,
    test: impl FnOnce() -> F,
) {
    tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(test());
    });
}

fn field<'a>(span: &'a SeenSpan, name: &str) -> &'a str {
    span.fields
        .get(name)
        .unwrap_or_else(|| panic!("`{}` has no field `{name}`: {span:#?}", span.name))
}

#[distributed_lock(key = "report:<id>", lease = "5s", client = locks)]
async fn report(locks: &LockClient, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

/// An acquisition and a hold, by hand and through the attribute, on a real Redis: each span
/// under the caller's span, with the fields the guide names, closed when the hold ends.
#[test]
fn acquisitions_and_holds_are_spans_under_the_callers_span() {
    let server = RedisServer::shared();
    let seen = Seen::default();
    traced(&seen, || async {
        let client = LockClient::builder(server.url())
            .fencing(true)
            .build()
            .await
            .unwrap();
        let request = tracing::info_span!("request");
        let _entered = request.enter();

        let guard = client.lock("span:order:7").acquire().await.unwrap();
        let token = guard.fencing_token().expect("fencing is on");
        let acquire = seen.one("distlock.acquire", "span:order:7");
        assert_eq!(acquire.parent.as_deref(), Some("request"));
        assert_eq!(field(&acquire, "backend"), "redis");
        assert_eq!(field(&acquire, "kind"), "write");
        assert_eq!(field(&acquire, "outcome"), "acquired");
        assert_eq!(field(&acquire, "fencing_token"), token.to_string());
        let waited: u64 = field(&acquire, "waited_ms").parse().unwrap();
        assert!(waited < 10_000, "{waited}");
        assert!(acquire.closed, "the acquisition's span ends with it");

        let hold = seen.one("distlock.hold", "span:order:7");
        assert_eq!(
            hold.parent.as_deref(),
            Some("request"),
            "beside the acquisition"
        );
        assert_eq!(field(&hold, "fencing_token"), token.to_string());
        assert_eq!(field(&hold, "lease_ms"), "30000");
        assert!(!hold.closed, "open while held");
        assert!(!hold.fields.contains_key("ended"));
        tokio::time::sleep(Duration::from_millis(50)).await;
        guard.release().await.unwrap();
        let hold = seen.one("distlock.hold", "span:order:7");
        assert_eq!(field(&hold, "ended"), "released");
        let held: u64 = field(&hold, "held_ms").parse().unwrap();
        assert!(held >= 50, "held {held} ms, slept 50");
        assert!(hold.closed, "closed at the release");

        // Through the attribute: the same two spans.
        assert_eq!(report(&client, 9).await.unwrap(), 9);
        let acquire = seen.one("distlock.acquire", "report:9");
        assert_eq!(acquire.parent.as_deref(), Some("request"));
        assert_eq!(field(&acquire, "outcome"), "acquired");
        let hold = seen.one("distlock.hold", "report:9");
        assert_eq!(field(&hold, "ended"), "released");
        assert!(hold.closed);

        // The kinds: a read lock, a permit, several keys.
        let read = client.lock("span:shelf").read().acquire().await.unwrap();
        let permit = client.semaphore("span:gpus", 2).acquire().await.unwrap();
        let both = client
            .lock_all(["span:b", "span:a"])
            .acquire()
            .await
            .unwrap();
        assert_eq!(
            field(&seen.one("distlock.acquire", "span:shelf"), "kind"),
            "read"
        );
        assert_eq!(
            field(&seen.one("distlock.acquire", "span:gpus"), "kind"),
            "permit"
        );
        assert_eq!(
            field(&seen.one("distlock.acquire", "span:b, span:a"), "outcome"),
            "acquired"
        );
        for key in ["span:a", "span:b"] {
            assert_eq!(
                seen.one("distlock.hold", key).parent.as_deref(),
                Some("request")
            );
        }
        read.release().await.unwrap();
        permit.release().await.unwrap();
        drop(both);
        for key in ["span:a", "span:b"] {
            let hold = seen.one("distlock.hold", key);
            assert_eq!(field(&hold, "ended"), "dropped", "{hold:#?}");
        }
    });
}

/// A busy try-once and a wait that runs out: the acquisition's outcome and error, and no hold.
#[test]
fn a_busy_lock_is_an_acquisition_span_with_its_outcome_and_no_hold() {
    let server = RedisServer::shared();
    let seen = Seen::default();
    traced(&seen, || async {
        let holder = LockClient::connect(&server.url()).await.unwrap();
        let held = holder.lock("span:busy").acquire().await.unwrap();
        let client = LockClient::connect(&server.url()).await.unwrap();
        let busy = client
            .lock("span:busy")
            .wait(Duration::ZERO)
            .acquire()
            .await;
        assert!(matches!(busy, Err(LockError::Busy { .. })), "{busy:?}");
        let timeout = client
            .lock("span:busy")
            .wait(Duration::from_millis(200))
            .acquire()
            .await;
        assert!(
            matches!(timeout, Err(LockError::Timeout { .. })),
            "{timeout:?}"
        );
        let spans = seen.spans("distlock.acquire", "span:busy");
        assert_eq!(spans.len(), 3, "{spans:#?}");
        assert_eq!(field(&spans[1], "outcome"), "busy");
        assert!(field(&spans[1], "error").contains("is busy"), "{spans:#?}");
        assert_eq!(field(&spans[2], "outcome"), "timeout");
        assert_eq!(field(&spans[2], "wait_ms"), "200");
        let waited: u64 = field(&spans[2], "waited_ms").parse().unwrap();
        assert!(waited >= 200, "{waited}");
        // Only the holder's hold.
        assert_eq!(seen.spans("distlock.hold", "span:busy").len(), 1);
        held.release().await.unwrap();
    });
}

/// A lock taken away (a forced release) is a WARN event naming the key, and its hold span
/// ends `lost`; a renewal that fails (the server stopped) is a WARN event before that.
#[test]
fn losses_and_failed_renewals_are_warnings_and_end_the_hold() {
    let mut server = RedisServer::start();
    let seen = Seen::default();
    traced(&seen, || async {
        let client = LockClient::connect(&server.url()).await.unwrap();
        let admin = LockClient::connect(&server.url()).await.unwrap();
        let guard = client
            .lock("span:taken")
            .lease(Duration::from_millis(600))
            .acquire()
            .await
            .unwrap();
        admin.force_release("span:taken").await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), guard.lost())
            .await
            .expect("the renewal finds the lock gone within a lease");
        let lost = seen.warnings("lock lost");
        assert_eq!(lost.len(), 1, "{lost:#?}");
        assert_eq!(
            lost[0].fields.get("key").map(String::as_str),
            Some("span:taken")
        );
        let hold = seen.one("distlock.hold", "span:taken");
        assert_eq!(field(&hold, "ended"), "lost");
        assert!(hold.closed, "{hold:#?}");
        assert!(guard.release().await.unwrap_err().is_lost());
        assert_eq!(
            field(&seen.one("distlock.hold", "span:taken"), "ended"),
            "lost"
        );

        // The server goes away: the renewals fail (WARN), then the lease runs out (lost).
        let guard = client
            .lock("span:cut")
            .lease(Duration::from_millis(900))
            .acquire()
            .await
            .unwrap();
        server.kill();
        tokio::time::timeout(Duration::from_secs(10), guard.lost())
            .await
            .expect("lost within a lease of the server's death");
        let failed = seen.warnings("renewal failed");
        assert!(
            failed
                .iter()
                .any(|event| event.fields.get("key").map(String::as_str) == Some("span:cut")),
            "{failed:#?}"
        );
        assert_eq!(
            field(&seen.one("distlock.hold", "span:cut"), "ended"),
            "lost"
        );
        drop(guard);
    });
}

/// The same spans through `tracing-opentelemetry`: each becomes an OpenTelemetry span whose
/// attributes are its fields and whose parent is the application's span. (The SDK's in-memory
/// exporter stands where a real one would send them: nothing leaves the process.)
#[test]
fn opentelemetry_sees_the_spans_with_their_fields_and_parent() {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::{InMemorySpanExporterBuilder, SdkTracerProvider};

    let server = RedisServer::shared();
    let exporter = InMemorySpanExporterBuilder::new().build();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("distlock-test"));
    traced_by(tracing_subscriber::registry().with(layer), || async {
        let client = LockClient::builder(server.url())
            .fencing(true)
            .build()
            .await
            .unwrap();
        let request = tracing::info_span!("request");
        let _entered = request.enter();
        let guard = client.lock("span:otel").acquire().await.unwrap();
        guard.release().await.unwrap();
    });
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let named = |name: &str| {
        spans
            .iter()
            .find(|span| span.name == name)
            .unwrap_or_else(|| {
                panic!(
                    "no `{name}` among {:?}",
                    spans.iter().map(|s| &s.name).collect::<Vec<_>>()
                )
            })
    };
    let attribute = |span: &opentelemetry_sdk::trace::SpanData, key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.as_str().into_owned())
            .unwrap_or_else(|| {
                panic!(
                    "`{}` has no attribute `{key}`: {:?}",
                    span.name, span.attributes
                )
            })
    };
    let request = named("request");
    let acquire = named("distlock.acquire");
    let hold = named("distlock.hold");
    for span in [acquire, hold] {
        assert_eq!(
            span.parent_span_id,
            request.span_context.span_id(),
            "{}",
            span.name
        );
        assert_eq!(attribute(span, "key"), "span:otel");
        assert_eq!(attribute(span, "backend"), "redis");
        assert!(attribute(span, "fencing_token").parse::<u64>().is_ok());
    }
    assert_eq!(attribute(acquire, "outcome"), "acquired");
    assert_eq!(attribute(hold, "ended"), "released");
    assert!(attribute(hold, "held_ms").parse::<u64>().is_ok());
}

/// A shared result over the store's size limit: the caller gets it all the same, nothing is
/// stored (the next caller computes again), and a warning names the limit and the key.
async fn oversized_result_is_not_shared(
    fixture: &dyn support::fixture::Fixture,
    seen: &Seen,
    limit: &str,
) {
    let client = fixture.client().await;
    let big = "x".repeat(2 * 1024 * 1024);
    let value = client
        .lock("span:big")
        .share(Duration::from_secs(60))
        .run(|| async { Ok::<_, LockError>(big.clone()) })
        .await
        .unwrap();
    assert_eq!(value.len(), big.len(), "the caller gets its value");
    assert_eq!(
        fixture.shared_ttl("lock:span:big").await,
        None,
        "nothing stored"
    );
    let warnings = seen.warnings("for a shared result: not shared");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    let message = &warnings[0].fields["message"];
    assert!(message.contains(limit), "the limit is named: {message}");
    assert_eq!(
        warnings[0].fields.get("key").map(String::as_str),
        Some("span:big")
    );
}

#[cfg(feature = "etcd")]
#[test]
fn an_oversized_shared_result_on_etcd_is_returned_not_stored_and_named() {
    let seen = Seen::default();
    traced(&seen, || async {
        let fixture = support::fixture::EtcdFixture::new();
        oversized_result_is_not_shared(&fixture, &seen, "etcd's limit of 1564672 bytes").await;
    });
}

#[cfg(feature = "zookeeper")]
#[test]
fn an_oversized_shared_result_on_zookeeper_is_returned_not_stored_and_named() {
    let seen = Seen::default();
    traced(&seen, || async {
        let fixture = support::fixture::ZookeeperFixture::new();
        oversized_result_is_not_shared(&fixture, &seen, "zookeeper's limit of 1040384 bytes").await;
    });
}
