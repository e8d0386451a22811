//! A pool of three GPUs shared by every worker of a cluster: a job runs under one of the three
//! permits of the semaphore `gpu-pool:<pool>`, so at most three train at once — and a worker
//! that crashes while holding a permit gives it back one lease later, by itself (the permit
//! lives on its own lease; there is no counter to leak, as there is with a counting semaphore).
//!
//! ```text
//! cargo run --example gpu_pool
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example gpu_pool
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use distlock::{BoxError, LockClient, distributed_lock};

const GPUS: u16 = 3;
const JOBS: usize = 12;

/// One training job, on one of the pool's GPUs.
#[distributed_lock(key = "gpu-pool:<pool>", permits = GPUS, lease = "5s", wait = "30s")]
async fn train(pool: &str, job: usize, inside: &AtomicUsize) -> Result<usize, BoxError> {
    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
    MOST_AT_ONCE.fetch_max(now, Ordering::SeqCst);
    if now > usize::from(GPUS) {
        return Err(format!("{now} jobs on {GPUS} GPUs").into());
    }
    tokio::time::sleep(Duration::from_millis(40)).await; // the work
    inside.fetch_sub(1, Ordering::SeqCst);
    Ok(job)
}

static MOST_AT_ONCE: AtomicUsize = AtomicUsize::new(0);

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var(LockClient::URL_ENV).unwrap_or_else(|_| "memory://".into());
    let client = LockClient::connect(&url).await?;
    distlock::init(client.clone())?;
    let pool = "a100";

    let started = Instant::now();
    let inside = Arc::new(AtomicUsize::new(0));
    let mut jobs = Vec::with_capacity(JOBS);
    for job in 0..JOBS {
        let inside = inside.clone();
        jobs.push(tokio::spawn(async move { train(pool, job, &inside).await }));
    }
    for job in jobs {
        job.await??;
    }
    let most = MOST_AT_ONCE.load(Ordering::SeqCst);
    println!(
        "backend {}: {JOBS} jobs on {GPUS} GPUs in {:.2?}: up to {most} at once, never more",
        client.backend_kind(),
        started.elapsed()
    );

    // A worker crashes holding a permit: its guard is never released (nor renewed). The
    // permit comes back when its lease ends — not before.
    let key = format!("gpu-pool:{pool}");
    let lease = Duration::from_secs(1);
    let mut held = Vec::new();
    for _ in 0..GPUS - 1 {
        held.push(client.semaphore(&key, GPUS).acquire().await?);
    }
    let crashed = client.semaphore(&key, GPUS).lease(lease).renew(false);
    std::mem::forget(crashed.acquire().await?);
    let crashed_at = Instant::now();
    if client.semaphore(&key, GPUS).try_acquire().await?.is_some() {
        return Err("a fourth permit while three are held".into());
    }
    let back = client
        .semaphore(&key, GPUS)
        .wait(Duration::from_secs(10))
        .acquire()
        .await?;
    let after = crashed_at.elapsed();
    println!(
        "a crashed worker's permit came back after {:.2}s (its lease: {lease:?}), \
         with {} of {GPUS} permits still held by live workers",
        after.as_secs_f64(),
        held.len()
    );
    back.release().await?;
    for guard in held {
        guard.release().await?;
    }
    Ok(())
}
