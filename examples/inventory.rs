//! A flash sale: 100 units in stock, 1,000 buyers at once. Each purchase reads the stock,
//! checks it, and writes it back one lower — under the lock `inventory:<sku>`, so the sale
//! never oversells. At the end exactly 100 were sold and the stock is zero.
//!
//! ```text
//! cargo run --example inventory
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example inventory
//! ```

#[path = "support/store.rs"]
mod store;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use distlock::distributed_lock;
use store::{BoxError, Store};

const STOCK: u64 = 100;
const BUYERS: usize = 1_000;

/// Buys one unit of `sku` if any is left. `Ok(false)`: sold out.
#[distributed_lock(key = "inventory:<sku>", lease = "5s", wait = "60s")]
async fn buy(sku: &str, store: &Store) -> Result<bool, BoxError> {
    let stock = store.get(sku).await?;
    if stock == 0 {
        return Ok(false);
    }
    tokio::task::yield_now().await; // another buyer would read the same stock right here
    store.set(sku, stock - 1).await?;
    Ok(true)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = store::init_lock_client(false).await?;
    let namespace = format!("distlock-example:inventory:{}", std::process::id());
    let store = Store::open(&url, &namespace).await?;
    let sku = "sku-42";
    store.set(sku, STOCK).await?;

    let sold = std::sync::Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut buyers = Vec::with_capacity(BUYERS);
    for _ in 0..BUYERS {
        let (store, sold) = (store.clone(), sold.clone());
        buyers.push(tokio::spawn(async move {
            if buy(sku, &store).await? {
                sold.fetch_add(1, Ordering::SeqCst);
            }
            Ok::<_, BoxError>(())
        }));
    }
    for buyer in buyers {
        buyer.await??;
    }
    let elapsed = started.elapsed();
    let left = store.get(sku).await?;
    store.clear(&[sku]).await?;
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
