//! Money moved between accounts: a transfer must hold both accounts' locks. Taken one by one
//! in argument order, `transfer(a, b)` and `transfer(b, a)` would deadlock each other until
//! `wait` ran out; with `key = ["account:<from>", "account:<to>"]` distlock takes the keys in
//! one canonical order (all at once, in one round trip, where the backend can), so they never
//! do. Two hundred transfers run at once in both directions, beside a stream of audits that
//! read one account alone; no balance is ever written by two transfers at once, so the total
//! stays what it was.
//!
//! ```text
//! cargo run --example transfer
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example transfer
//! ```

#[path = "support/store.rs"]
mod store;

use std::time::{Duration, Instant};

use distlock::{LockError, distributed_lock};
use store::{BoxError, Store};

const ACCOUNTS: u64 = 4;
const OPENING: u64 = 1_000;
const TRANSFERS: u64 = 200;

/// Moves `amount` from one account to another while holding both. The keys are named in
/// argument order; distlock sorts them, and takes `transfer(7, 7, …)`'s one key once.
#[distributed_lock(key = ["account:<bank>:<from>", "account:<bank>:<to>"], wait = "30s")]
async fn transfer(
    bank: &str,
    store: &Store,
    from: u64,
    to: u64,
    amount: u64,
) -> Result<(), BoxError> {
    let (a, b) = (balance(store, from).await?, balance(store, to).await?);
    if from == to || a < amount {
        return Ok(()); // nothing to move
    }
    tokio::task::yield_now().await; // another transfer would slip in here without the locks
    store.set(&format!("account{from}"), a - amount).await?;
    store.set(&format!("account{to}"), b + amount).await?;
    Ok(())
}

/// One account alone: an audit of its balance.
#[distributed_lock(key = "account:<bank>:<account>", wait = "30s")]
async fn audit(bank: &str, store: &Store, account: u64) -> Result<u64, BoxError> {
    balance(store, account).await
}

async fn balance(store: &Store, account: u64) -> Result<u64, BoxError> {
    store.get(&format!("account{account}")).await
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = store::init_lock_client(false).await?;
    let client = distlock::client()?;
    let bank = format!("example-{}", std::process::id());
    let store = Store::open(&url, &bank).await?;
    for account in 0..ACCOUNTS {
        store.set(&format!("account{account}"), OPENING).await?;
    }

    let started = Instant::now();
    let mut tasks = Vec::new();
    for n in 0..TRANSFERS {
        let (bank, store) = (bank.clone(), store.clone());
        // Half of them one way, half the other: 0 → 1 and 1 → 0, 2 → 3 and 3 → 2, …
        let (from, to) = if n % 2 == 0 {
            (n % 4, (n + 1) % 4)
        } else {
            ((n + 1) % 4, n % 4)
        };
        tasks.push(tokio::spawn(async move {
            transfer(&bank, &store, from, to, 1 + n % 7).await?;
            audit(&bank, &store, n % ACCOUNTS).await.map(drop)
        }));
    }
    for task in tasks {
        task.await??;
    }
    let mut total = 0;
    for account in 0..ACCOUNTS {
        total += balance(&store, account).await?;
    }
    println!(
        "backend {}: {TRANSFERS} transfers in both directions in {:.2?}, no deadlock; \
         total {total} (opened with {})",
        client.backend_kind(),
        started.elapsed(),
        ACCOUNTS * OPENING
    );
    if total != ACCOUNTS * OPENING {
        return Err(format!("the total changed: {total}").into());
    }

    // One `wait` for the set: an account held elsewhere makes a transfer time out, naming it,
    // and the other account is not left locked behind.
    let held = client.lock(format!("account:{bank}:1")).acquire().await?;
    let busy = client
        .lock_all([format!("account:{bank}:0"), format!("account:{bank}:1")])
        .wait(Duration::from_millis(200))
        .acquire()
        .await;
    match busy {
        Err(LockError::Timeout { key, .. }) => println!("a transfer waited 200ms for `{key}`"),
        other => return Err(format!("expected a timeout, got {other:?}").into()),
    }
    let free = client
        .lock(format!("account:{bank}:0"))
        .try_acquire()
        .await?;
    println!(
        "account 0 after the timeout: {}",
        if free.is_some() {
            "free"
        } else {
            "still locked"
        }
    );
    drop(free);
    held.release().await?;
    let names: Vec<String> = (0..ACCOUNTS).map(|a| format!("account{a}")).collect();
    store
        .clear(&names.iter().map(String::as_str).collect::<Vec<_>>())
        .await?;
    Ok(())
}
