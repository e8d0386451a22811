//! A job that must run once per tick across the whole cluster (what ShedLock does for Java):
//! several workers tick on their own timers and each tries the job with `wait = "0s"`. The one
//! that gets the lock runs it; the others skip at once.
//!
//! The workers' clocks are not aligned: here worker 0's clock runs 150 ms behind the others'
//! (a simulated shift). The job itself takes 20 ms, so by the time worker 0's timer fires the
//! others' run is long over — with a plain lock worker 0 would find it free and run every tick
//! a second time (ShedLock's issue #6). `min_hold` keeps the lock for 350 ms of the 400 ms
//! period however quickly the job returns, so the late worker finds it busy, and the next
//! tick finds it free again. The example runs the ticks both ways and prints what each did.
//!
//! ```text
//! cargo run --example scheduled_job
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example scheduled_job
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{BoxError, LockClient, LockError, distributed_lock};

const WORKERS: usize = 5;
const TICKS: u64 = 8;
const PERIOD: Duration = Duration::from_millis(400);
/// How far worker 0's clock is behind the others'.
const SHIFT: Duration = Duration::from_millis(150);

type Runs = Arc<Mutex<Vec<(u64, usize)>>>;

/// The report for `tick`, on whichever worker gets the lock first; held at least 350 ms (of
/// the 400 ms period) however soon it returns.
#[distributed_lock(
    key = "job:nightly-report",
    wait = "0s",
    lease = "10s",
    min_hold = "350ms"
)]
async fn run_report(
    tick: u64,
    worker: usize,
    runs: &Mutex<Vec<(u64, usize)>>,
) -> Result<(), LockError> {
    tokio::time::sleep(Duration::from_millis(20)).await; // the report itself
    runs.lock().unwrap().push((tick, worker));
    Ok(())
}

/// The same job under a plain lock: released as soon as it returns.
#[distributed_lock(key = "job:nightly-report-plain", wait = "0s", lease = "10s")]
async fn run_report_plain(
    tick: u64,
    worker: usize,
    runs: &Mutex<Vec<(u64, usize)>>,
) -> Result<(), LockError> {
    tokio::time::sleep(Duration::from_millis(20)).await;
    runs.lock().unwrap().push((tick, worker));
    Ok(())
}

async fn worker(id: usize, min_hold: bool, runs: Runs) -> Result<u64, LockError> {
    let mut ran = 0;
    // Every worker's timer fires at the same instants by its own clock; worker 0's clock is
    // behind, so its instants come `SHIFT` later.
    let shift = if id == 0 { SHIFT } else { Duration::ZERO };
    let start = tokio::time::Instant::now() + shift;
    let mut timer = tokio::time::interval_at(start, PERIOD);
    for tick in 1..=TICKS {
        timer.tick().await;
        // Besides the shift, no two timers fire at exactly the same instant.
        tokio::time::sleep(Duration::from_millis(fastrand::u64(0..10))).await;
        let result = if min_hold {
            run_report(tick, id, &runs).await
        } else {
            run_report_plain(tick, id, &runs).await
        };
        match result {
            Ok(()) => ran += 1,
            Err(error) if error.is_busy() => {} // another worker runs this tick: skip
            Err(error) => return Err(error),
        }
    }
    Ok(ran)
}

/// Runs the ticks on every worker; how many times each tick ran, and each worker's runs.
async fn ticks(min_hold: bool) -> Result<(BTreeMap<u64, usize>, Vec<u64>), BoxError> {
    let runs: Runs = Arc::default();
    let workers: Vec<_> = (0..WORKERS)
        .map(|id| tokio::spawn(worker(id, min_hold, Arc::clone(&runs))))
        .collect();
    let mut per_worker = Vec::new();
    for worker in workers {
        per_worker.push(worker.await??);
    }
    let mut per_tick = BTreeMap::new();
    for (tick, _) in runs.lock().unwrap().iter() {
        *per_tick.entry(*tick).or_insert(0) += 1;
    }
    Ok((per_tick, per_worker))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var(LockClient::URL_ENV).unwrap_or_else(|_| "memory://".into());
    distlock::init(LockClient::connect(&url).await?)?;
    let backend = distlock::client()?.backend_kind();

    let (plain, _) = ticks(false).await?;
    let twice = plain.values().filter(|&&n| n > 1).count();
    println!(
        "backend {backend}, plain lock: {twice} of {TICKS} ticks ran more than once (worker 0's \
         clock is {SHIFT:?} behind: it found the lock free again)"
    );

    let (per_tick, per_worker) = ticks(true).await?;
    let expected: BTreeMap<u64, usize> = (1..=TICKS).map(|tick| (tick, 1)).collect();
    if per_tick != expected {
        return Err(
            format!("each tick must run exactly once, ran (tick → runs): {per_tick:?}").into(),
        );
    }
    println!(
        "backend {backend}, min_hold = \"350ms\": {WORKERS} workers × {TICKS} ticks: every tick \
         ran exactly once (runs per worker: {per_worker:?})"
    );
    Ok(())
}
