//! A flash sale: 100 units in stock, 1,000 buyers at once. Each purchase reads the stock,
//! checks it, and writes it back one lower, under the lock `inventory:<sku>`, so the sale
//! never oversells. At the end exactly 100 were sold and the stock is zero.
//!
//! ```text
//! cargo run --example inventory
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example inventory   # the locks on Redis
//! ```
//!
//! The stock is a number in this process, read and written in two steps with an `.await`
//! between them, as with a database you read and then update: only the lock keeps two buyers
//! apart.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use distlock::{BoxError, LockClient, distributed_lock};

const STOCK: u64 = 100;
const BUYERS: usize = 1_000;

/// Buys one unit of `sku` if any is left. `Ok(false)`: sold out.
#[distributed_lock(key = "inventory:<sku>", lease = "5s", wait = "60s")]
async fn buy(sku: &str, stock: &Mutex<u64>) -> Result<bool, BoxError> {
    let left = *stock.lock().unwrap();
    if left == 0 {
        return Ok(false);
    }
    tokio::task::yield_now().await; // another buyer would read the same stock right here
    *stock.lock().unwrap() = left - 1;
    Ok(true)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var(LockClient::URL_ENV).unwrap_or_else(|_| "memory://".into());
    let client = LockClient::connect(&url).await?;
    distlock::init(client.clone())?;
    let sku = "sku-42";
    let stock = Arc::new(Mutex::new(STOCK));

    let sold = Arc::new(AtomicU64::new(0));
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
    let left = *stock.lock().unwrap();
    let sold = sold.load(Ordering::SeqCst);
    if sold != STOCK || left != 0 {
        return Err(format!("OVERSOLD or lost sales: sold {sold} of {STOCK}, {left} left").into());
    }
    println!(
        "backend {}: {BUYERS} buyers, stock {STOCK}: sold exactly {sold}, {left} left, never oversold ({:.2?})",
        client.backend_kind(),
        started.elapsed()
    );
    Ok(())
}
