//! A lock peer driven one command per line on stdin, each answered by one line on stdout —
//! the protocol `bench/src/peer.rs` speaks (and `bench/peers/java/CuratorPeer.java`):
//!
//! - `seq <prefix> <calls> <reused 0|1>` → µs per try-acquire + release, one after another,
//!   on the fresh keys `<prefix><i>` (or all on the key `<prefix>`);
//! - `tp <prefix> <window ms>` → pairs per second of 64 tasks on the fresh keys
//!   `<prefix><task>:<i>`;
//! - `handoff <key> <window ms>` → `<grants/s> <p50 µs> <p99 µs>`: 4 providers (pools) × 4
//!   tasks waiting on one key; the gaps from one provider's release to another's next grant.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use distributed_lock_core::error::LockResult;
use distributed_lock_core::traits::{DistributedLock, LockHandle, LockProvider};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::Error;
use crate::measure;

/// One uncontended try-acquire + release of `name`.
async fn pair<P: LockProvider>(provider: &P, name: &str) -> Result<(), Error> {
    let lock = provider.create_lock(name);
    let handle = lock
        .try_acquire()
        .await
        .map_err(|e| format!("try_acquire {name}: {e}"))?
        .ok_or_else(|| format!("an uncontended lock `{name}` was busy"))?;
    handle
        .release()
        .await
        .map_err(|e| format!("release {name}: {e}"))?;
    Ok(())
}

/// Serves the commands with providers made by `make`.
pub async fn serve<P, F, Fut>(make: F) -> Result<(), Error>
where
    P: LockProvider + 'static,
    P::Lock: 'static,
    F: Fn() -> Fut,
    Fut: Future<Output = LockResult<P>>,
{
    let provider = Arc::new(make().await.map_err(|e| format!("connect: {e}"))?);
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut out = tokio::io::stdout();
    while let Some(line) = lines.next_line().await? {
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["seq", prefix, calls, reused] => {
                let calls: u64 = calls.parse()?;
                let t = Instant::now();
                for i in 0..calls {
                    if *reused == "1" {
                        pair(&*provider, prefix).await?;
                    } else {
                        pair(&*provider, &format!("{prefix}{i}")).await?;
                    }
                }
                format!("{}", t.elapsed().as_secs_f64() * 1e6 / calls as f64)
            }
            ["tp", prefix, window] => {
                let window = Duration::from_millis(window.parse()?);
                let (stop, done) = (
                    Arc::new(AtomicBool::new(false)),
                    Arc::new(AtomicU64::new(0)),
                );
                let mut tasks = Vec::new();
                for t in 0..64 {
                    let (provider, stop, done) = (provider.clone(), stop.clone(), done.clone());
                    let prefix = prefix.to_string();
                    tasks.push(tokio::spawn(async move {
                        let mut i = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            pair(&*provider, &format!("{prefix}{t}:{i}")).await?;
                            i += 1;
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok::<_, Error>(())
                    }));
                }
                tokio::time::sleep(window).await;
                stop.store(true, Ordering::Relaxed);
                for task in tasks {
                    task.await??;
                }
                format!(
                    "{}",
                    done.load(Ordering::Relaxed) as f64 / window.as_secs_f64()
                )
            }
            ["handoff", key, window] => {
                let window = Duration::from_millis(window.parse()?);
                let mut tasks = Vec::new();
                for c in 0..4 {
                    let provider = Arc::new(make().await.map_err(|e| format!("connect: {e}"))?);
                    for _ in 0..4 {
                        let (provider, key) = (provider.clone(), key.to_string());
                        tasks.push((c, move || {
                            let (provider, key) = (provider.clone(), key.clone());
                            async move {
                                let lock = provider.create_lock(&key);
                                let handle = lock
                                    .acquire(Some(Duration::from_secs(30)))
                                    .await
                                    .map_err(|e| format!("acquire {key}: {e}"))?;
                                let granted = Instant::now();
                                handle
                                    .release()
                                    .await
                                    .map_err(|e| format!("release: {e}"))?;
                                Ok::<_, crate::Error>(granted)
                            }
                        }));
                    }
                }
                let (rate, p50, p99) = measure::handoff(window, tasks).await?;
                format!("{rate} {p50} {p99}")
            }
            _ => format!("unknown command: {line}"),
        };
        out.write_all(format!("{answer}\n").as_bytes()).await?;
        out.flush().await?;
    }
    Ok(())
}
