//! A price list read by many, refreshed now and then: readers serve prices under the read lock
//! `catalog:<name>`, together; a refresh rewrites the list under the write lock of the same key,
//! alone. The list is two entries that must add up (a price and its tax-inclusive twin, say):
//! the refresh writes them one after the other, and no reader ever sees one without the other.
//!
//! ```text
//! cargo run --example catalog
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example catalog
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distlock::{BoxError, LockClient, distributed_lock};

/// The two entries always add up to this.
const TOTAL: u64 = 1_000;
const READERS: usize = 8;
const REFRESHES: u64 = 20;

/// Named numbers: Redis keys `<namespace>:<name>` with a `redis://` URL, else a map in this
/// process. Each read and write is its own step: only the lock keeps them together.
struct Kv {
    namespace: String,
    redis: Option<redis::aio::MultiplexedConnection>,
    memory: Mutex<HashMap<String, u64>>,
}

impl Kv {
    async fn open(url: &str, namespace: String) -> Result<Kv, BoxError> {
        let redis = if url.starts_with("redis://") {
            Some(
                redis::Client::open(url)?
                    .get_multiplexed_async_connection()
                    .await?,
            )
        } else {
            None
        };
        Ok(Kv {
            namespace,
            redis,
            memory: Mutex::default(),
        })
    }

    async fn get(&self, name: &str) -> Result<u64, BoxError> {
        let Some(conn) = &self.redis else {
            return Ok(self.memory.lock().unwrap().get(name).copied().unwrap_or(0));
        };
        let key = format!("{}:{name}", self.namespace);
        let value: Option<u64> = redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn.clone())
            .await?;
        Ok(value.unwrap_or(0))
    }

    async fn set(&self, name: &str, value: u64) -> Result<(), BoxError> {
        let Some(conn) = &self.redis else {
            self.memory.lock().unwrap().insert(name.to_owned(), value);
            return Ok(());
        };
        let key = format!("{}:{name}", self.namespace);
        let () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query_async(&mut conn.clone())
            .await?;
        Ok(())
    }

    async fn delete(&self, names: &[&str]) -> Result<(), BoxError> {
        if let Some(conn) = &self.redis {
            let keys: Vec<String> = names
                .iter()
                .map(|n| format!("{}:{n}", self.namespace))
                .collect();
            let _: u64 = redis::cmd("DEL")
                .arg(keys)
                .query_async(&mut conn.clone())
                .await?;
        }
        Ok(())
    }
}

/// Serves the price list: both entries, read under the shared lock. Returns the pair.
#[distributed_lock(key = "catalog:<name>", mode = "read", lease = "5s", wait = "30s")]
async fn prices(name: &str, store: &Kv, inside: &AtomicUsize) -> Result<(u64, u64), BoxError> {
    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
    MOST_AT_ONCE.fetch_max(now, Ordering::SeqCst);
    let net = store.get(&format!("{name}:net")).await?;
    tokio::time::sleep(Duration::from_millis(5)).await; // a refresh would land right here
    let gross = store.get(&format!("{name}:gross")).await?;
    inside.fetch_sub(1, Ordering::SeqCst);
    Ok((net, gross))
}

/// Rewrites the price list under the exclusive lock: one entry, then the other.
#[distributed_lock(key = "catalog:<name>", lease = "5s", wait = "30s")]
async fn refresh(name: &str, store: &Kv, net: u64) -> Result<(), BoxError> {
    store.set(&format!("{name}:net"), net).await?;
    tokio::time::sleep(Duration::from_millis(5)).await; // half-written, for a moment
    store.set(&format!("{name}:gross"), TOTAL - net).await?;
    Ok(())
}

static MOST_AT_ONCE: AtomicUsize = AtomicUsize::new(0);

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var(distlock::LockClient::URL_ENV).unwrap_or_else(|_| "memory://".into());
    distlock::init(LockClient::connect(&url).await?)?;
    let namespace = format!("distlock-example:catalog:{}", std::process::id());
    let store = Arc::new(Kv::open(&url, namespace).await?);
    let name = "spring";
    refresh(name, &store, TOTAL / 2).await?;

    let started = Instant::now();
    let inside = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::with_capacity(READERS);
    for _ in 0..READERS {
        let (store, inside, done) = (store.clone(), inside.clone(), done.clone());
        readers.push(tokio::spawn(async move {
            let mut reads = 0u64;
            while !done.load(Ordering::SeqCst) {
                let (net, gross) = prices(name, &store, &inside).await?;
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
        refresh(name, &store, (i * 37) % TOTAL).await?;
    }
    done.store(true, Ordering::SeqCst);
    let mut reads = 0;
    for reader in readers {
        reads += reader.await??;
    }
    let elapsed = started.elapsed();
    store
        .delete(&[&format!("{name}:net"), &format!("{name}:gross")])
        .await?;
    let most = MOST_AT_ONCE.load(Ordering::SeqCst);
    println!(
        "backend {}: {reads} reads by {READERS} readers (up to {most} at once), {REFRESHES} refreshes: \
         no reader saw a half-written price list ({elapsed:.2?})",
        distlock::client()?.backend_kind()
    );
    Ok(())
}
