//! A price list read by many, refreshed now and then: readers serve prices under the read lock
//! `catalog:<name>`, together; a refresh rewrites the list under the write lock of the same key,
//! alone. The list is two entries that must add up (a price and its tax-inclusive twin, say):
//! the refresh writes them one after the other, and no reader ever sees one without the other.
//!
//! ```text
//! cargo run --example catalog
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example catalog   # the locks on Redis
//! ```
//!
//! The list is kept in this process, each entry read and written on its own, with an `.await`
//! in between: only the lock keeps a reader from seeing it half-written.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use distlock::{BoxError, LockClient, distributed_lock};

/// The two entries always add up to this.
const TOTAL: u64 = 1_000;
const READERS: usize = 8;
const REFRESHES: u64 = 20;

/// The price list: two entries, each read and written on its own.
#[derive(Default)]
struct PriceList {
    net: AtomicU64,
    gross: AtomicU64,
}

/// How many readers are inside `prices` now, and the most at once.
static INSIDE: AtomicUsize = AtomicUsize::new(0);
static MOST_AT_ONCE: AtomicUsize = AtomicUsize::new(0);

/// Serves the price list: both entries, read under the shared lock.
#[distributed_lock(key = "catalog:<name>", mode = "read", lease = "5s", wait = "30s")]
async fn prices(name: &str, list: &PriceList) -> Result<(u64, u64), BoxError> {
    let now = INSIDE.fetch_add(1, Ordering::SeqCst) + 1;
    MOST_AT_ONCE.fetch_max(now, Ordering::SeqCst);
    let net = list.net.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(5)).await; // a refresh would land right here
    let gross = list.gross.load(Ordering::SeqCst);
    INSIDE.fetch_sub(1, Ordering::SeqCst);
    Ok((net, gross))
}

/// Rewrites the price list under the exclusive lock: one entry, then the other.
#[distributed_lock(key = "catalog:<name>", lease = "5s", wait = "30s")]
async fn refresh(name: &str, list: &PriceList, net: u64) -> Result<(), BoxError> {
    list.net.store(net, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(5)).await; // half-written, for a moment
    list.gross.store(TOTAL - net, Ordering::SeqCst);
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var(LockClient::URL_ENV).unwrap_or_else(|_| "memory://".into());
    let client = LockClient::connect(&url).await?;
    distlock::init(client.clone())?;
    let name = "spring";
    let list = Arc::new(PriceList::default());
    refresh(name, &list, TOTAL / 2).await?;

    let started = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::with_capacity(READERS);
    for _ in 0..READERS {
        let (list, done) = (list.clone(), done.clone());
        readers.push(tokio::spawn(async move {
            let mut reads = 0u64;
            while !done.load(Ordering::SeqCst) {
                let (net, gross) = prices(name, &list).await?;
                if net + gross != TOTAL {
                    return Err::<u64, BoxError>(
                        format!("a reader saw a half-written price list: {net} + {gross}").into(),
                    );
                }
                reads += 1;
            }
            Ok(reads)
        }));
    }
    for i in 1..=REFRESHES {
        tokio::time::sleep(Duration::from_millis(20)).await;
        refresh(name, &list, (i * 37) % TOTAL).await?;
    }
    done.store(true, Ordering::SeqCst);
    let mut reads = 0;
    for reader in readers {
        reads += reader.await??;
    }
    let most = MOST_AT_ONCE.load(Ordering::SeqCst);
    println!(
        "backend {}: {reads} reads by {READERS} readers (up to {most} at once), {REFRESHES} refreshes: \
         no reader saw a half-written price list ({:.2?})",
        client.backend_kind(),
        started.elapsed()
    );
    Ok(())
}
