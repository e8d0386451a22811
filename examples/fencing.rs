//! Fencing tokens, end to end. A lease cannot stop a holder that is paused (a GC pause, SIGSTOP,
//! a VM migration) past its lease: when it resumes it still believes it holds the lock, while
//! somebody else does. Only the storage can tell, if every write carries the writer's fencing
//! token and the storage refuses a token lower than one it has already accepted.
//!
//! Here holder A takes the lock (a 1 s lease, not renewed) and writes; then it "pauses" for
//! longer than its lease. B is granted the lock with a higher token and writes. A resumes and
//! writes: the storage refuses it. The program exits non-zero if the stale write got through.
//!
//! ```text
//! cargo run --example fencing
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example fencing   # the tokens from Redis
//! ```
//!
//! The storage here is a value in this process that keeps the highest token it accepted,
//! compared and written in one step. A real store does the same in one statement:
//! [`distlock::fence::SQL_FENCED_UPDATE`] in SQL (`examples/postgres.rs` runs it), or the Lua
//! script [`distlock::fence::REDIS_FENCED_SET`] on Redis.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use distlock::{BoxError, LockClient, distributed_lock};

/// What a fenced write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FencedWrite {
    /// Written: the resource's fence is now the writer's token.
    Written,
    /// Refused: the resource already accepted the larger token `highest`.
    Stale { highest: u64 },
}

/// A resource that keeps the highest fencing token it accepted and refuses a write carrying a
/// lower one.
#[derive(Default)]
struct Resource {
    /// (highest token accepted, value)
    state: Mutex<(u64, String)>,
}

impl Resource {
    /// Compares the token and writes in one critical section: no other write comes in between.
    fn write(&self, value: &str, token: u64) -> FencedWrite {
        let mut state = self.state.lock().unwrap();
        if token < state.0 {
            return FencedWrite::Stale { highest: state.0 };
        }
        *state = (token, value.to_owned());
        FencedWrite::Written
    }

    fn read(&self) -> String {
        self.state.lock().unwrap().1.clone()
    }
}

/// B's write, through the attribute: `fencing = true` gives the grant a token, and the body
/// reads it with `distlock::current()`.
#[distributed_lock(key = "report:<name>", fencing = true, lease = "5s", wait = "10s")]
async fn publish(name: &str, resource: &Resource, text: &str) -> Result<FencedWrite, BoxError> {
    let token = distlock::current()
        .and_then(|lock| lock.fencing_token())
        .ok_or("no fencing token")?;
    println!("B: granted `report:{name}` with token {token}; writing");
    Ok(resource.write(text, token))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var(LockClient::URL_ENV).unwrap_or_else(|_| "memory://".into());
    let client = LockClient::connect(&url).await?;
    distlock::init(client.clone())?;
    let resource = Resource::default();
    let name = "weekly";
    let started = Instant::now();

    // A: a short lease, not renewed, as if its renewals stopped while it was paused.
    let a = client
        .lock(format!("report:{name}"))
        .fencing(true)
        .lease(Duration::from_secs(1))
        .renew(false)
        .acquire()
        .await?;
    let token_a = a.fencing_token().ok_or("no fencing token")?;
    println!("A: granted `report:{name}` with token {token_a}");
    let first = resource.write("written by A", token_a);
    println!("A: first write: {first:?}");

    // A pauses here. Meanwhile its lease runs out and B is granted the lock.
    let by_b = publish(name, &resource, "written by B").await?;
    println!(
        "B: write: {by_b:?} ({:.1?} after A's grant)",
        started.elapsed()
    );

    // A resumes, unaware, and writes with its old token.
    println!(
        "A: resumes (its guard says lost: {}) and writes with token {token_a}",
        a.is_lost()
    );
    let late = resource.write("A's late write", token_a);
    let value = resource.read();
    println!("A: late write: {late:?}; the resource holds {value:?}");
    let _ = a.release().await; // Err(Lost): the lock was no longer A's

    if first != FencedWrite::Written || by_b != FencedWrite::Written {
        return Err("a write by the current holder was refused".into());
    }
    match late {
        FencedWrite::Stale { highest } if value == "written by B" => {
            println!(
                "backend {}: the stale write (token {token_a}) was REFUSED: the storage had \
                 accepted token {highest}",
                client.backend_kind()
            );
            Ok(())
        }
        _ => Err(format!("the stale write was ACCEPTED: the resource holds {value:?}").into()),
    }
}
