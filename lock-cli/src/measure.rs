//! The measuring code `distlock bench` and the repository's benchmark (`bench/`, which writes
//! BENCHMARKS.md) share, so the rows they have in common — throughput of tasks on keys of their
//! own, hand-overs between clients, percentiles — are computed the same way:
//! - [`throughput`]: tasks repeat one operation each for a window; operations per second;
//! - [`handoff`]: tasks of several clients take turns on one key for a window; grants per
//!   second and the p50 / p99 gap from one client's release to the next grant of *another*
//!   client (a hand-over within a client is let through in-process, and says nothing about the
//!   store);
//! - [`percentile`].
//!
//! Pure `std` + `tokio`: the benchmark and its peers' workspace (`bench/peers`) compile this
//! same file (`#[path]`), so a peer's rows are computed by the same arithmetic as distlock's.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Runs each of `tasks` — one operation, again and again — for `window` and returns operations
/// per second, all tasks together. The first error ends the run and is returned; a task that
/// panics panics here.
pub async fn throughput<F, Fut, E>(window: Duration, tasks: Vec<F>) -> Result<f64, E>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for mut once in tasks {
        let stop = stop.clone();
        handles.push(tokio::spawn(async move {
            let mut done = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                once().await?;
                done += 1;
            }
            Ok::<_, E>(done)
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(window).await;
    stop.store(true, Ordering::Relaxed);
    let total = joined(handles).await?.into_iter().sum::<u64>();
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// Runs the handoff `tasks` for `window` — each, its client's index and one take-and-give-back
/// of the lock returning when it was granted (its release begins at once), again and again,
/// as [`throughput`] runs them — and returns grants per second and the p50 / p99 gaps between clients (µs).
pub async fn handoff<F, Fut, E>(
    window: Duration,
    tasks: Vec<(usize, F)>,
) -> Result<(f64, f64, f64), E>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = Result<Instant, E>> + Send,
    E: Send + 'static,
{
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let takers = tasks
        .into_iter()
        .map(|(client, once)| {
            let log = Arc::clone(&log);
            move || {
                let (granted, log) = (once(), Arc::clone(&log));
                async move {
                    let granted = granted.await?;
                    log.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((granted, client));
                    Ok(())
                }
            }
        })
        .collect();
    let grants = throughput(window, takers).await?;
    let log = std::mem::take(&mut *log.lock().unwrap_or_else(|p| p.into_inner()));
    let gaps = between_clients(log);
    let us = |p| percentile(&gaps, p).as_secs_f64() * 1e6;
    Ok((grants, us(0.5), us(0.99)))
}

/// Every task's result, in order; the first error, else a task's panic resumed here.
async fn joined<T, E>(handles: Vec<tokio::task::JoinHandle<Result<T, E>>>) -> Result<Vec<T>, E> {
    let mut results = Vec::with_capacity(handles.len());
    for handle in handles {
        match handle.await {
            Ok(result) => results.push(result?),
            Err(join) => std::panic::resume_unwind(join.into_panic()),
        }
    }
    Ok(results)
}

/// The gaps, sorted, from a grant (and so its release) to the next grant when that went to
/// another client, from a log of `(granted, client)`.
fn between_clients(mut log: Vec<(Instant, usize)>) -> Vec<Duration> {
    log.sort_by_key(|(granted, _)| *granted);
    let mut gaps: Vec<Duration> = log
        .windows(2)
        .filter(|w| w[0].1 != w[1].1)
        .map(|w| w[1].0.saturating_duration_since(w[0].0))
        .collect();
    gaps.sort();
    gaps
}

/// The `p`-quantile (0 ≤ `p` ≤ 1) of `sorted`; zero when it is empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    match sorted.len() {
        0 => Duration::ZERO,
        n => sorted[((n - 1) as f64 * p).round() as usize],
    }
}
