//! A library that locks with the attribute and never touches the application's global client:
//! its `Repository` owns a `LockClient` and its annotated methods name it (`client =
//! self.locks`). The application here initialises a global client of its own on another store,
//! to show the two never mix; and `on_busy = "skip"` lets a second `compact` return `Ok(None)`
//! at once while the first one runs.
//!
//! ```text
//! cargo run --example library
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example library
//! cargo test --example library   # the test below: with_client gives it a store of its own
//! ```

use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockError, distributed_lock};
use tokio::sync::Mutex;

/// A library's type: it takes the lock client it is given, and locks through it.
pub struct Repository {
    locks: LockClient,
    orders: Mutex<Vec<u64>>,
}

impl Repository {
    pub fn new(locks: LockClient) -> Repository {
        Repository {
            locks,
            orders: Mutex::new(Vec::new()),
        }
    }

    /// Saves an order under the lock `order:<id>` of the repository's own client.
    #[distributed_lock(key = "order:<id>", lease = "5s", wait = "2s", client = self.locks)]
    pub async fn save(&self, id: u64) -> Result<(), LockError> {
        self.orders.lock().await.push(id);
        Ok(())
    }

    /// Compacts the store, once at a time cluster-wide: a call that finds another one running
    /// returns `Ok(None)` without waiting (`on_busy = "skip"`).
    #[distributed_lock(key = "compaction", wait = "0s", on_busy = "skip", client = self.locks)]
    pub async fn compact(&self) -> Result<Option<usize>, LockError> {
        tokio::time::sleep(Duration::from_secs(2)).await; // the work; the second call comes meanwhile
        Ok(Some(self.orders.lock().await.len()))
    }
}

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let url = std::env::var(LockClient::URL_ENV).unwrap_or_else(|_| "memory://library".into());
    // The application's own global client, on another store: the repository never uses it.
    distlock::init(LockClient::connect("memory://the-application").await?)?;
    let repository = Arc::new(Repository::new(LockClient::connect(&url).await?));
    for id in 1..=5 {
        repository.save(id).await?;
    }
    // One compaction runs; a second one, started while the first holds the lock, is skipped.
    let first = tokio::spawn({
        let repository = Arc::clone(&repository);
        async move { repository.compact().await }
    });
    while repository.locks.inspect("compaction").await?.is_none() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = repository.compact().await;
    let first = first.await.expect("the first compaction's task");
    println!(
        "backend {}: saved 5 orders; compaction ran once ({:?}), the concurrent one was skipped ({:?})",
        repository.locks.backend_kind(),
        first?,
        second?
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test with a backend of its own, in parallel with any other: `with_client` gives the
    /// annotated functions that name no client this one (here the repository names its own).
    #[tokio::test]
    async fn a_skipped_compaction_returns_none() {
        let locks = LockClient::connect("memory://a-test-of-its-own")
            .await
            .unwrap();
        let repository = Repository::new(locks.clone());
        let held = locks.lock("compaction").acquire().await.unwrap();
        assert_eq!(repository.compact().await.unwrap(), None);
        held.release().await.unwrap();
        assert_eq!(repository.compact().await.unwrap(), Some(0));
    }
}
