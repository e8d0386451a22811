//! Handoff between clients, measured the same way for distlock and for every peer: tasks of
//! several clients take turns on one key for a window; the row is grants per second and the
//! p50 / p99 gap from one client's release to the next grant of *another* client (a handoff
//! within a client is let through in-process, and says nothing about the store).
//!
//! Pure `std` + `tokio`: the peers' workspace (`bench/peers`) compiles this same file
//! (`#[path]`), so its rows are computed by the same arithmetic as distlock's.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Runs the handoff `tasks` for `window` — each, its client's index and one take-and-give-back
/// of the lock returning when it was granted (its release begins at once), again and again —
/// and returns grants per second and the p50 / p99 gaps between clients (µs).
pub async fn run<F, Fut>(window: Duration, tasks: Vec<(usize, F)>) -> Result<(f64, f64, f64), Error>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = Result<Instant, Error>> + Send,
{
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for (client, once) in tasks {
        let (log, stop) = (log.clone(), stop.clone());
        handles.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let granted = once().await?;
                log.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((granted, client));
            }
            Ok::<_, Error>(())
        }));
    }
    tokio::time::sleep(window).await;
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.await??;
    }
    let log = std::mem::take(&mut *log.lock().unwrap_or_else(|p| p.into_inner()));
    let grants = log.len() as f64 / window.as_secs_f64();
    let gaps = between_clients(log);
    let us = |p| percentile(&gaps, p).as_secs_f64() * 1e6;
    Ok((grants, us(0.5), us(0.99)))
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
