//! A contender of the benchmark's row 11 that is not distlock: takes turns on one key as told
//! by its environment (the protocol of `bench/src/contention.rs`) and prints one
//! `asked granted released` line (ns since the UNIX epoch) per acquisition.
//!
//! `BENCH_PEER=rslock`: [rslock](https://crates.io/crates/rslock) over one server, with its
//! default retries (3 tries, a random 0–200 ms pause between them, retried until granted).
//!
//! `BENCH_PEER=distributed-lock-postgres` or `distributed-lock-mysql` (rows 7 and 8): the
//! [distributed-lock](https://crates.io/crates/distributed-lock-postgres) crates (PostgreSQL
//! advisory locks, MySQL `GET_LOCK`) against `BENCH_URL`, with their default pools, driven one
//! command at a time over stdin/stdout — the protocol of `bench/peers/java/CuratorPeer.java`
//! (see `lines::serve`). `BENCH_PEER_POOL=64` gives the PostgreSQL one a pool of that many
//! connections instead of sqlx's default 10 (each of its locks keeps one while held); the
//! MySQL one too.

/// The handoff row's arithmetic, shared with distlock's rows and `distlock bench`
/// (`lock-cli/src/measure.rs`).
#[path = "../../../lock-cli/src/measure.rs"]
#[allow(dead_code)]
mod measure;
mod lines;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

type Error = Box<dyn std::error::Error + Send + Sync>;

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    let var = |name: &str| std::env::var(name).map_err(|_| format!("{name} is not set"));
    let peer = var("BENCH_PEER")?;
    match peer.as_str() {
        "distributed-lock-postgres" => {
            let url = var("BENCH_URL")?;
            // `BENCH_PEER_POOL=64`: a pool of that many connections instead of sqlx's default
            // (10), which also bounds the locks a process can hold at once.
            if let Ok(size) = std::env::var("BENCH_PEER_POOL") {
                let size: u32 = size.parse()?;
                let provider = || async {
                    let pool = sqlx::postgres::PgPoolOptions::new()
                        .max_connections(size)
                        .connect(&url)
                        .await
                        .map_err(|e| {
                            distributed_lock_core::error::LockError::Connection(Box::new(e))
                        })?;
                    distributed_lock_postgres::PostgresLockProvider::builder()
                        .pool(pool)
                        .build()
                        .await
                };
                return lines::serve(provider).await;
            }
            let provider = || distributed_lock_postgres::PostgresLockProvider::new(url.clone());
            return lines::serve(provider).await;
        }
        "distributed-lock-mysql" => {
            let url = var("BENCH_URL")?;
            // `BENCH_PEER_POOL=64`: as for PostgreSQL (sqlx's default is 10 connections, and
            // each held `GET_LOCK` keeps one).
            if let Ok(size) = std::env::var("BENCH_PEER_POOL") {
                let size: u32 = size.parse()?;
                let provider = || async {
                    let pool = sqlx::mysql::MySqlPoolOptions::new()
                        .max_connections(size)
                        .connect(&url)
                        .await
                        .map_err(|e| {
                            distributed_lock_core::error::LockError::Connection(Box::new(e))
                        })?;
                    distributed_lock_mysql::MySqlLockProvider::builder()
                        .pool(pool)
                        .build()
                        .await
                };
                return lines::serve(provider).await;
            }
            let provider = || distributed_lock_mysql::MySqlLockProvider::new(url.clone());
            return lines::serve(provider).await;
        }
        _ => {}
    }
    if peer != "rslock" {
        return Err(format!("unknown BENCH_PEER `{peer}` (this binary knows `rslock`)").into());
    }
    let url = var("BENCH_URL")?;
    let key = var("BENCH_KEY")?;
    let tasks: usize = var("BENCH_TASKS")?.parse()?;
    let start: u64 = var("BENCH_START_NS")?.parse()?;
    let window = Duration::from_millis(var("BENCH_WINDOW_MS")?.parse()?);
    let hold = Duration::from_micros(var("BENCH_HOLD_US")?.parse()?);
    let manager = Arc::new(rslock::LockManager::new(vec![url]));
    let end = start + window.as_nanos() as u64;
    let turns = Arc::new(Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (manager, key, turns) = (Arc::clone(&manager), key.clone(), Arc::clone(&turns));
        handles.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_nanos(start.saturating_sub(now_ns()))).await;
            while now_ns() < end {
                let asked = now_ns();
                let lock = manager
                    .acquire_no_guard(key.as_bytes(), Duration::from_secs(30))
                    .await
                    .map_err(|e| format!("rslock: {e}"))?;
                let granted = now_ns();
                if !hold.is_zero() {
                    tokio::time::sleep(hold).await;
                }
                let released = now_ns();
                manager.unlock(&lock).await;
                turns.lock().unwrap().push((asked, granted, released));
            }
            Ok::<_, Error>(())
        }));
    }
    for handle in handles {
        handle.await??;
    }
    for (asked, granted, released) in turns.lock().unwrap().iter() {
        println!("{asked} {granted} {released}");
    }
    Ok(())
}
