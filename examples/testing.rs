//! Testing your own locked functions, with no server and no global: each test builds a
//! `memory://<name>` client of its own and runs the code under test inside
//! `distlock::with_client(&client, …)`. An annotated function that names no `client = …` then
//! locks through that client; tests run in parallel without seeing each other's locks.
//!
//! ```text
//! cargo test --example testing    # the #[tokio::test]s below
//! cargo run --example testing     # the same checks, run by main
//! ```
//!
//! In production the same functions use the global client (`distlock::init(…)` at startup, e.g.
//! with `DISTLOCK_URL=redis://127.0.0.1:6379`); nothing in them changes for the tests.

use std::sync::Mutex;
use std::time::Duration;

use distlock::{LockClient, LockError, distributed_lock, with_client};

/// The code under test: sends invoice `id`, one sender at a time. It writes what it does to
/// `log`, so a test can see whether two calls overlapped.
#[distributed_lock(key = "invoice:<id>", lease = "5s", wait = "5s")]
async fn send_invoice(id: u64, log: &Mutex<Vec<String>>) -> Result<(), LockError> {
    log.lock().unwrap().push(format!("start {id}"));
    tokio::time::sleep(Duration::from_millis(50)).await; // the work
    log.lock().unwrap().push(format!("end {id}"));
    Ok(())
}

/// The same lock, asked once: a busy invoice is `Err(LockError::Busy)` at once.
#[distributed_lock(key = "invoice:<id>", wait = "0s")]
async fn send_invoice_now(id: u64) -> Result<(), LockError> {
    Ok(())
}

/// A job that skips when another run holds the lock: `Ok(None)`, not an error.
#[distributed_lock(key = "nightly-report", wait = "0s", on_busy = "skip")]
async fn nightly_report() -> Result<Option<&'static str>, LockError> {
    Ok(Some("report sent"))
}

// Each check is a plain async fn so `main` can run it too; in your own crate, write its body
// straight into the #[tokio::test].

/// Two concurrent calls for one invoice never overlap: the second starts after the first ends.
async fn two_calls_for_one_invoice_never_overlap() {
    let client = LockClient::connect("memory://two-calls").await.unwrap();
    let log = Mutex::new(Vec::new());
    let (a, b) = with_client(&client, async {
        // Two branches of one task are two owners: they exclude each other. (A task spawned
        // inside does not inherit the client: wrap its future in `with_client` too.)
        tokio::join!(send_invoice(7, &log), send_invoice(7, &log))
    })
    .await;
    a.unwrap();
    b.unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        ["start 7", "end 7", "start 7", "end 7"]
    );
}

/// While something else holds `invoice:7`, `wait = "0s"` returns `LockError::Busy` naming
/// the key; once it is released the call goes through.
async fn a_busy_invoice_times_out_at_once() {
    let client = LockClient::connect("memory://busy-invoice").await.unwrap();
    let held = client.lock("invoice:7").acquire().await.unwrap();
    let busy = with_client(&client, send_invoice_now(7)).await;
    assert!(
        matches!(&busy, Err(LockError::Busy { key }) if key == "invoice:7"),
        "{busy:?}"
    );
    held.release().await.unwrap();
    with_client(&client, send_invoice_now(7)).await.unwrap();
}

/// `on_busy = "skip"`: a busy job returns `Ok(None)` without running.
async fn a_busy_report_is_skipped() {
    let client = LockClient::connect("memory://busy-report").await.unwrap();
    let held = client.lock("nightly-report").acquire().await.unwrap();
    assert_eq!(with_client(&client, nightly_report()).await.unwrap(), None);
    held.release().await.unwrap();
    let ran = with_client(&client, nightly_report()).await.unwrap();
    assert_eq!(ran, Some("report sent"));
}

/// Outside `with_client`, and with no global client, a call says so instead of locking nothing.
async fn without_a_client_a_call_says_so() {
    let error = send_invoice_now(7).await.unwrap_err();
    assert!(matches!(error, LockError::NotInitialized), "{error:?}");
}

#[tokio::main]
async fn main() {
    two_calls_for_one_invoice_never_overlap().await;
    println!("ok: two concurrent calls for one invoice never overlapped");
    a_busy_invoice_times_out_at_once().await;
    println!("ok: wait = \"0s\" on a busy invoice returned LockError::Busy at once");
    a_busy_report_is_skipped().await;
    println!("ok: on_busy = \"skip\" on a busy report returned Ok(None)");
    without_a_client_a_call_says_so().await;
    println!("ok: with no client, a call returned LockError::NotInitialized");
    println!("4 checks passed on memory://, no global client installed");
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn two_calls_for_one_invoice_never_overlap() {
        super::two_calls_for_one_invoice_never_overlap().await;
    }

    #[tokio::test]
    async fn a_busy_invoice_times_out_at_once() {
        super::a_busy_invoice_times_out_at_once().await;
    }

    #[tokio::test]
    async fn a_busy_report_is_skipped() {
        super::a_busy_report_is_skipped().await;
    }

    #[tokio::test]
    async fn without_a_client_a_call_says_so() {
        super::without_a_client_a_call_says_so().await;
    }
}
