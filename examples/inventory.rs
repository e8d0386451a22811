//! A flash sale: 100 units in stock, 1,000 buyers at once. Each purchase reads the stock,
//! checks it, and writes it back one lower — under the lock `inventory:<sku>`, so the sale
//! never oversells. At the end exactly 100 were sold and the stock is zero.
//!
//! ```text
//! cargo run --example inventory
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example inventory
//! ```

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use distlock::{BoxError, LockClient, distributed_lock};

const STOCK: u64 = 100;
const BUYERS: usize = 1_000;

/// The stock of one SKU: the Redis key `<key>` with a `redis://` URL, else a number in this
/// process. Read and written in two steps, so only the lock keeps two buyers apart.
struct Stock {
    key: String,
    redis: Option<redis::aio::MultiplexedConnection>,
    memory: Mutex<u64>,
}

impl Stock {
    async fn get(&self) -> Result<u64, BoxError> {
        let Some(conn) = &self.redis else {
            return Ok(*self.memory.lock().unwrap());
        };
        let value: Option<u64> = redis::cmd("GET")
            .arg(&self.key)
            .query_async(&mut conn.clone())
            .await?;
        Ok(value.unwrap_or(0))
    }

    async fn set(&self, value: u64) -> Result<(), BoxError> {
        match &self.redis {
            Some(conn) => {
                let () = redis::cmd("SET")
                    .arg(&self.key)
                    .arg(value)
                    .query_async(&mut conn.clone())
                    .await?;
            }
            None => *self.memory.lock().unwrap() = value,
        }
        Ok(())
    }
}

/// Buys one unit of `sku` if any is left. `Ok(false)`: sold out.
#[distributed_lock(key = "inventory:<sku>", lease = "5s", wait = "60s")]
async fn buy(sku: &str, stock: &Stock) -> Result<bool, BoxError> {
    let left = stock.get().await?;
    if left == 0 {
        return Ok(false);
    }
    tokio::task::yield_now().await; // another buyer would read the same stock right here
    stock.set(left - 1).await?;
    Ok(true)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var(distlock::LockClient::URL_ENV).unwrap_or_else(|_| "memory://".into());
    distlock::init(LockClient::connect(&url).await?)?;
    let sku = "sku-42";
    let redis = if url.starts_with("redis://") {
        Some(
            redis::Client::open(url)?
                .get_multiplexed_async_connection()
                .await?,
        )
    } else {
        None
    };
    let key = format!("distlock-example:inventory:{}:{sku}", std::process::id());
    let stock = std::sync::Arc::new(Stock {
        key,
        redis,
        memory: Mutex::new(0),
    });
    stock.set(STOCK).await?;

    let sold = std::sync::Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut buyers = Vec::with_capacity(BUYERS);
    for _ in 0..BUYERS {
        let (stock, sold) = (stock.clone(), sold.clone());
        buyers.push(tokio::spawn(async move {
            if buy(sku, &stock).await? {
                sold.fetch_add(1, Ordering::SeqCst);
            }
            Ok::<_, BoxError>(())
        }));
    }
    for buyer in buyers {
        buyer.await??;
    }
    let elapsed = started.elapsed();
    let left = stock.get().await?;
    if let Some(conn) = &stock.redis {
        let _: u64 = redis::cmd("DEL")
            .arg(&stock.key)
            .query_async(&mut conn.clone())
            .await?;
    }
    let sold = sold.load(Ordering::SeqCst);
    if sold != STOCK || left != 0 {
        return Err(format!(
            "OVERSOLD or lost sales: sold {sold} of {STOCK}, {left} left in stock"
        )
        .into());
    }
    println!(
        "backend {}: {BUYERS} buyers, stock {STOCK}: sold exactly {sold}, {left} left, never oversold ({elapsed:.2?})",
        distlock::client()?.backend_kind()
    );
    Ok(())
}
