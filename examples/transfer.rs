//! Money moved between accounts: a transfer holds both accounts' locks. Taken one by one in
//! argument order, `transfer(a, b)` and `transfer(b, a)` would deadlock each other until `wait`
//! ran out; with `key = ["account:<bank>:<from>", "account:<bank>:<to>"]` distlock takes the
//! keys in one canonical order, so they never do. Two hundred transfers run at once in both
//! directions, beside audits that lock one account alone; the total never changes.
//!
//! The transfer is also cancel-safe. With the default `on_lost = "abort"` a lost lease drops the
//! body at whatever `.await` it is in: a debit and a credit written in two awaits could be cut
//! between them, the money debited and never credited. So both balances are written in ONE
//! step (one critical section here; one transaction or one Lua script in a database): it
//! happens whole or not at all. The step also checks both balances are still the ones read, so
//! a holder that resumes after its lease ran out cannot overwrite a newer transfer's balances.
//!
//! ```text
//! cargo run --example transfer
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example transfer   # the locks on Redis
//! ```
//!
//! The balances are kept in this process.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distlock::{BoxError, LockClient, LockError, distributed_lock};

const ACCOUNTS: u64 = 4;
const OPENING: u64 = 1_000;
const TRANSFERS: u64 = 200;

/// The balances of a bank's accounts.
struct Bank {
    name: String,
    balances: Mutex<Vec<u64>>,
}

impl Bank {
    fn balance(&self, account: u64) -> u64 {
        self.balances.lock().unwrap()[account as usize]
    }

    /// `from` goes from `a` to `a - amount` and `to` from `b` to `b + amount`, in one step,
    /// if neither changed since it was read.
    fn write_both(
        &self,
        (from, a): (u64, u64),
        (to, b): (u64, u64),
        amount: u64,
    ) -> Result<(), BoxError> {
        let mut balances = self.balances.lock().unwrap(); // never held across an .await
        if balances[from as usize] != a || balances[to as usize] != b {
            return Err(format!("account {from} or {to} changed under the transfer").into());
        }
        balances[from as usize] = a - amount;
        balances[to as usize] = b + amount;
        Ok(())
    }
}

/// Moves `amount` from one account to another while holding both. The keys are named in
/// argument order; distlock sorts them, and takes `transfer(7, 7, …)`'s one key once.
#[distributed_lock(key = ["account:<bank.name>:<from>", "account:<bank.name>:<to>"], wait = "30s")]
async fn transfer(bank: &Bank, from: u64, to: u64, amount: u64) -> Result<(), BoxError> {
    let (a, b) = (bank.balance(from), bank.balance(to));
    if from == to || a < amount {
        return Ok(()); // nothing to move
    }
    tokio::task::yield_now().await; // another transfer would slip in here without the locks
    // One write for both accounts: this body may be dropped at any .await (on_lost = "abort").
    bank.write_both((from, a), (to, b), amount)
}

/// One account alone: an audit of its balance.
#[distributed_lock(key = "account:<bank.name>:<account>", wait = "30s")]
async fn audit(bank: &Bank, account: u64) -> Result<u64, BoxError> {
    Ok(bank.balance(account))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var(LockClient::URL_ENV).unwrap_or_else(|_| "memory://".into());
    let client = LockClient::connect(&url).await?;
    distlock::init(client.clone())?;
    let bank = Arc::new(Bank {
        name: "main".to_owned(),
        balances: Mutex::new(vec![OPENING; ACCOUNTS as usize]),
    });

    let started = Instant::now();
    let mut tasks = Vec::new();
    for n in 0..TRANSFERS {
        let bank = Arc::clone(&bank);
        // Half of them one way, half the other: 0 → 1 and 1 → 0, 2 → 3 and 3 → 2, …
        let (from, to) = if n % 2 == 0 {
            (n % 4, (n + 1) % 4)
        } else {
            ((n + 1) % 4, n % 4)
        };
        tasks.push(tokio::spawn(async move {
            transfer(&bank, from, to, 1 + n % 7).await?;
            audit(&bank, n % ACCOUNTS).await.map(drop)
        }));
    }
    for task in tasks {
        task.await??;
    }
    let mut total = 0;
    for account in 0..ACCOUNTS {
        total += bank.balance(account);
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
    let name = &bank.name;
    let held = client.lock(format!("account:{name}:1")).acquire().await?;
    let busy = client
        .lock_all([format!("account:{name}:0"), format!("account:{name}:1")])
        .wait(Duration::from_millis(200))
        .acquire()
        .await;
    match busy {
        Err(LockError::Timeout { key, .. }) => println!("a transfer waited 200ms for `{key}`"),
        other => return Err(format!("expected a timeout, got {other:?}").into()),
    }
    let free = client
        .lock(format!("account:{name}:0"))
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
    // Released with `.await`, not dropped: a dropped guard is released by a background task,
    // which a process that exits right after may not give time to finish (the lock would
    // then stay until its lease ran out).
    if let Some(free) = free {
        free.release().await?;
    }
    held.release().await?;
    Ok(())
}
