//! A job that must run once per tick across the whole cluster (what ShedLock does for Java):
//! several workers tick on the same timer and each tries the job with `wait = "0s"`. The one
//! that gets the lock runs it; the others skip at once. The job also records the last tick it
//! ran, under the same lock, so a worker that arrives after the winner finished skips too.
//!
//! ```text
//! cargo run --example scheduled_job
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example scheduled_job
//! ```

#[path = "support/store.rs"]
mod store;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{LockError, distributed_lock};
use store::{BoxError, Store};

const WORKERS: usize = 5;
const TICKS: u64 = 10;
const PERIOD: Duration = Duration::from_millis(100);

/// Runs the report for `tick` unless some worker already did. `Ok(true)`: this worker ran it.
#[distributed_lock(key = "job:nightly-report", wait = "0s", lease = "10s")]
async fn run_report(
    tick: u64,
    worker: usize,
    store: &Store,
    runs: &Mutex<Vec<(u64, usize)>>,
) -> Result<bool, BoxError> {
    // Tick numbers start at 1, so the stored 0 means "never ran".
    if store.get("last-report-tick").await? >= tick {
        return Ok(false);
    }
    tokio::time::sleep(Duration::from_millis(20)).await; // the report itself
    runs.lock().unwrap().push((tick, worker));
    store.set("last-report-tick", tick).await?;
    Ok(true)
}

async fn worker(
    id: usize,
    store: Store,
    runs: Arc<Mutex<Vec<(u64, usize)>>>,
) -> Result<u64, BoxError> {
    let mut ran = 0;
    let mut timer = tokio::time::interval(PERIOD);
    for tick in 1..=TICKS {
        timer.tick().await;
        // Workers' clocks are never exactly aligned.
        tokio::time::sleep(Duration::from_millis(fastrand::u64(0..15))).await;
        match run_report(tick, id, &store, &runs).await {
            Ok(true) => ran += 1,
            Ok(false) => {}
            Err(error) => match error.downcast_ref::<LockError>() {
                Some(LockError::Timeout { .. }) => {} // another worker is running it: skip
                _ => return Err(error),
            },
        }
    }
    Ok(ran)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = store::init_lock_client(false).await?;
    let namespace = format!("distlock-example:scheduled:{}", std::process::id());
    let store = Store::open(&url, &namespace).await?;
    let runs = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    for id in 0..WORKERS {
        workers.push(tokio::spawn(worker(id, store.clone(), runs.clone())));
    }
    let mut per_worker = Vec::new();
    for worker in workers {
        per_worker.push(worker.await??);
    }
    store.clear(&["last-report-tick"]).await?;
    let mut ticks: Vec<u64> = runs.lock().unwrap().iter().map(|(tick, _)| *tick).collect();
    ticks.sort_unstable();
    if ticks != (1..=TICKS).collect::<Vec<_>>() {
        return Err(format!("each tick must run exactly once, ran: {ticks:?}").into());
    }
    println!(
        "backend {}: {WORKERS} workers × {TICKS} ticks: every tick ran exactly once (runs per worker: {per_worker:?})",
        distlock::client()?.backend_kind()
    );
    Ok(())
}
