//! The smallest use: one locked function, a client, one call.
//!
//! ```text
//! cargo run --example minimal                                        # memory://
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example minimal
//! ```

use distlock::{LockClient, LockError, distributed_lock};

/// Runs only while this process holds `invoice:<id>`, across every process on the same store.
#[distributed_lock(key = "invoice:<id>", lease = "10s", wait = "5s")]
async fn send_invoice(id: u64) -> Result<String, LockError> {
    let lock = distlock::current().expect("the body runs under its lock");
    Ok(format!("invoice {id} sent under the lock `{}`", lock.key()))
}

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let url = std::env::var(LockClient::URL_ENV).unwrap_or_else(|_| "memory://".into());
    let client = LockClient::connect(&url).await?;
    distlock::init(client.clone())?;
    let sent = send_invoice(42).await?;
    println!("{sent} (backend {})", client.backend_kind());
    Ok(())
}
