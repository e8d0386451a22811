//! Graceful shutdown: a worker takes one job after another, each under its own lock
//! `job:<id>`. On Ctrl-C or SIGTERM (what `kill`, systemd and Kubernetes send) it stops taking
//! new jobs, lets the job in progress finish under its lock, gives the lock back, and exits 0.
//!
//! The signal does not cancel the job: dropping a locked call's future mid-way would release the
//! lock with the job half done. The loop only looks at the signal between jobs.
//!
//! ```text
//! cargo run --example shutdown                      # then Ctrl-C
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example shutdown &
//! kill -TERM $!
//! ```

use std::future::Future;
use std::time::Duration;

use distlock::{BoxError, LockClient, distributed_lock};

/// How long one job takes, and the pause before the next one arrives.
const JOB: Duration = Duration::from_millis(1_500);
const IDLE: Duration = Duration::from_millis(200);

/// One job, under the lock `job:<id>`: released when it returns, on every path.
#[distributed_lock(key = "job:<id>", lease = "10s", wait = "10s")]
async fn run_job(id: u64) -> Result<(), BoxError> {
    println!("job {id}: in progress under its lock");
    tokio::time::sleep(JOB).await; // the work
    let held = distlock::current().is_some_and(|lock| !lock.is_lost());
    println!("job {id}: finished (lock still held: {held})");
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C (SIGINT), naming it. The handlers are installed at once, so a
/// signal from now on is caught even before the future is first awaited.
#[cfg(unix)]
fn shutdown_signal() -> std::io::Result<impl Future<Output = &'static str>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = interrupt.recv() => "Ctrl-C",
        }
    })
}

#[cfg(not(unix))]
fn shutdown_signal() -> std::io::Result<impl Future<Output = &'static str>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    })
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var(LockClient::URL_ENV).unwrap_or_else(|_| "memory://".into());
    let client = LockClient::connect(&url).await?;
    distlock::init(client.clone())?;

    // The signal flips a flag the worker reads between jobs; it never interrupts a job.
    let (stop, mut stopping) = tokio::sync::watch::channel(false);
    let signal = shutdown_signal()?;
    tokio::spawn(async move {
        let name = signal.await;
        println!("{name}: no new jobs; the job in progress finishes first");
        let _ = stop.send(true);
    });
    println!(
        "worker {} on backend {}: send SIGTERM or press Ctrl-C to stop",
        std::process::id(),
        client.backend_kind()
    );

    let mut done = 0;
    for id in 1.. {
        tokio::select! {
            _ = stopping.wait_for(|stop| *stop) => break, // stop at once between jobs
            () = tokio::time::sleep(IDLE) => {}           // the next job arrives
        }
        run_job(id).await?; // not in the select: a signal waits for the job to end
        done += 1;
    }

    let left = client.list("*", 10).await?;
    println!(
        "stopped after {done} job(s); locks still held: {}; exiting 0",
        left.len()
    );
    Ok(())
}
