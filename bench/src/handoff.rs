//! Handoff between clients, measured the same way for distlock and for every peer: tasks of
//! several clients take turns on one key for a window; the row is grants per second and the
//! p50 / p99 gap from one client's release to the next grant of *another* client (a handoff
//! within a client is let through in-process, and says nothing about the store).
//!
//! Pure `std` + `tokio`: the peers' workspace (`bench/peers`) compiles this same file
//! (`#[path]`), so its rows are computed by the same arithmetic as distlock's.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Runs the handoff `tasks` for `window`: each, its client's index and one take-and-give-back
/// of the lock (returning when it was granted and when its release began), again and again.
/// The log of `(granted, released, client)` and the number of grants.
pub async fn handoff_log<F, Fut>(
    window: Duration,
    tasks: Vec<(usize, F)>,
) -> Result<(Vec<(Instant, Instant, usize)>, u64), Error>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(Instant, Instant), Error>> + Send,
{
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let grants = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for (client, once) in tasks {
        let (log, stop, grants) = (log.clone(), stop.clone(), grants.clone());
        handles.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let (granted, released) = once().await?;
                grants.fetch_add(1, Ordering::Relaxed);
                log.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((granted, released, client));
            }
            Ok::<_, Error>(())
        }));
    }
    tokio::time::sleep(window).await;
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.await??;
    }
    let log = log.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Ok((log, grants.load(Ordering::Relaxed)))
}

/// The gaps, sorted, from a release to the next grant when that grant went to another client,
/// from a log of `(granted, released, client)`.
pub fn between_clients(mut log: Vec<(Instant, Instant, usize)>) -> Vec<Duration> {
    log.sort_by_key(|(granted, _, _)| *granted);
    let mut gaps: Vec<Duration> = log
        .windows(2)
        .filter(|w| w[0].2 != w[1].2)
        .map(|w| w[1].0.saturating_duration_since(w[0].1))
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

/// A handoff run's row: grants per second over `window`, and the p50 / p99 gaps between
/// clients (µs).
pub fn summary(
    log: Vec<(Instant, Instant, usize)>,
    grants: u64,
    window: Duration,
) -> (f64, f64, f64) {
    let gaps = between_clients(log);
    let us = |p| percentile(&gaps, p).as_secs_f64() * 1e6;
    (grants as f64 / window.as_secs_f64(), us(0.5), us(0.99))
}
