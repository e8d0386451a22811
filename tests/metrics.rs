//! The `metrics` feature against a real `redis-server`: what each metric records for an
//! acquisition, a wait, a timeout, a renewal, a lost lease, a failed backend, and that no label
//! ever carries a lock key. A small recorder of the test's own collects the values.
//!
//! A binary of its own: the recorder is process-global, so another test's acquisitions in the
//! same process would be counted too.
#![cfg(feature = "metrics")]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{LockClient, LockError};
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use support::RedisServer;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One metric's value: a counter's total, a gauge's value (as f64 bits), a histogram's count.
#[derive(Default)]
struct Cell(AtomicU64);

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::SeqCst);
    }
    fn absolute(&self, value: u64) {
        self.0.fetch_max(value, Ordering::SeqCst);
    }
}

impl GaugeFn for Cell {
    fn increment(&self, value: f64) {
        self.update(|v| v + value);
    }
    fn decrement(&self, value: f64) {
        self.update(|v| v - value);
    }
    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::SeqCst);
    }
}

impl HistogramFn for Cell {
    fn record(&self, value: f64) {
        assert!(
            (0.0..60.0).contains(&value),
            "a duration in seconds: {value}"
        );
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Cell {
    fn update(&self, f: impl Fn(f64) -> f64) {
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |bits| {
                Some(f(f64::from_bits(bits)).to_bits())
            });
    }
}

#[derive(Default)]
struct Collected {
    cells: Mutex<BTreeMap<String, Arc<Cell>>>,
    described: Mutex<Vec<String>>,
}

#[derive(Clone, Default)]
struct TestRecorder(Arc<Collected>);

impl TestRecorder {
    fn cell(&self, key: &Key) -> Arc<Cell> {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        self.0
            .cells
            .lock()
            .unwrap()
            .entry(name)
            .or_default()
            .clone()
    }

    fn counter(&self, name: &str) -> u64 {
        self.0
            .cells
            .lock()
            .unwrap()
            .get(name)
            .map_or(0, |c| c.0.load(Ordering::SeqCst))
    }

    fn gauge(&self, name: &str) -> f64 {
        self.0
            .cells
            .lock()
            .unwrap()
            .get(name)
            .map_or(0.0, |c| f64::from_bits(c.0.load(Ordering::SeqCst)))
    }
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
        self.0
            .described
            .lock()
            .unwrap()
            .push(key.as_str().to_owned());
    }
    fn describe_gauge(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
        self.0
            .described
            .lock()
            .unwrap()
            .push(key.as_str().to_owned());
    }
    fn describe_histogram(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
        self.0
            .described
            .lock()
            .unwrap()
            .push(key.as_str().to_owned());
    }
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.cell(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.cell(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.cell(key))
    }
}

const ACQUIRED: &str = "distlock_acquisitions_total{backend=redis,outcome=acquired}";
const TIMEOUT: &str = "distlock_acquisitions_total{backend=redis,outcome=timeout}";
const ERROR: &str = "distlock_acquisitions_total{backend=redis,outcome=error}";
const ACQUIRE_SECONDS: &str = "distlock_acquire_seconds{backend=redis,outcome=acquired}";
const WAIT_SECONDS: &str = "distlock_wait_seconds{backend=redis}";
const HELD: &str = "distlock_locks_held{backend=redis}";
const LOST: &str = "distlock_leases_lost_total{backend=redis}";
const RENEWALS: &str = "distlock_renewals_total{backend=redis}";
const ACQUIRE_ERRORS: &str = "distlock_backend_errors_total{backend=redis,op=acquire}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_records_what_happened_and_no_label_names_a_key() {
    let recorder = TestRecorder::default();
    metrics::set_global_recorder(recorder.clone()).expect("the only recorder");
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    {
        let described = recorder.0.described.lock().unwrap();
        for name in distlock::metrics::METRIC_NAMES {
            assert!(described.iter().any(|d| d == name), "{name} not described");
        }
    }

    // An uncontended acquisition: counted, timed, held; released: no longer held.
    let guard = client.lock("order:1").acquire().await.unwrap();
    assert_eq!(recorder.counter(ACQUIRED), 1);
    assert_eq!(recorder.counter(ACQUIRE_SECONDS), 1);
    assert_eq!(recorder.counter(WAIT_SECONDS), 0, "it did not wait");
    assert_eq!(recorder.gauge(HELD), 1.0);

    // A busy lock: a timeout, then a wait that ends when the holder releases.
    let busy = client.lock("order:1").wait(ms(100)).acquire().await;
    assert!(matches!(busy, Err(LockError::Timeout { .. })), "{busy:?}");
    assert_eq!(recorder.counter(TIMEOUT), 1);
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move { client.lock("order:1").wait(ms(5_000)).acquire().await })
    };
    tokio::time::sleep(ms(100)).await;
    guard.release().await.unwrap();
    let second = waiter.await.unwrap().unwrap();
    assert_eq!(recorder.counter(ACQUIRED), 2);
    assert_eq!(recorder.counter(WAIT_SECONDS), 1, "the waiter's wait");
    assert_eq!(recorder.gauge(HELD), 1.0);
    drop(second);
    assert_eq!(recorder.gauge(HELD), 0.0, "a dropped guard is not held");

    // Renewals, then a lease lost to another owner.
    let renewed = client
        .lock("order:2")
        .lease(ms(300))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(ms(450)).await;
    assert!(recorder.counter(RENEWALS) >= 1, "renewed every 100 ms");
    let mut conn = server.connection().await;
    let _: () = redis::cmd("SET")
        .arg("lock:order:2")
        .arg("someone-else")
        .query_async(&mut conn)
        .await
        .unwrap();
    tokio::time::timeout(ms(2_000), renewed.lost())
        .await
        .expect("told at the next renewal");
    // Counted by the task that marked it lost, right after waking the guard's listeners.
    assert!(
        support::eventually(ms(1_000), || async { recorder.counter(LOST) == 1 }).await,
        "lost leases: {}",
        recorder.counter(LOST)
    );
    drop(renewed);

    // The server gone: an error, counted as an acquisition error and a backend error.
    drop(server);
    let failed = client.lock("order:3").wait(Duration::ZERO).acquire().await;
    assert!(
        matches!(failed, Err(LockError::Backend { .. })),
        "{failed:?}"
    );
    assert_eq!(recorder.counter(ERROR), 1);
    assert_eq!(recorder.counter(ACQUIRE_ERRORS), 1);

    // Labels: backend, outcome and op only — never a key.
    for name in recorder.0.cells.lock().unwrap().keys() {
        assert!(!name.contains("order"), "a key in a label: {name}");
        let labels = &name[name.find('{').unwrap() + 1..name.len() - 1];
        for label in labels.split(',') {
            let key = label.split('=').next().unwrap();
            assert!(
                ["backend", "outcome", "op"].contains(&key),
                "unexpected label {label} in {name}"
            );
        }
    }
}
