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
//! cargo run --example fencing                                   # storage: a map in memory
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example fencing   # storage: a Redis hash
//! ```
//!
//! On Redis the check and the write are one Lua script ([`distlock::fence::REDIS_FENCED_SET`],
//! run with redis-rs's `Script`); in SQL it is
//! `UPDATE … SET value = $2, fence = $1 WHERE id = $3 AND fence <= $1` (see `distlock::fence`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use distlock::fence::REDIS_FENCED_SET;
use distlock::{BoxError, LockClient, distributed_lock};

/// What a fenced write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FencedWrite {
    /// Written: the resource's fence is now the writer's token.
    Written,
    /// Refused: the resource already accepted the larger token `highest`.
    Stale { highest: u64 },
}

/// A resource that keeps the highest fencing token it accepted and refuses writes carrying a
/// lower one: a Redis hash (fields `value` and `fence`), or a value under a `Mutex` in memory.
struct Storage {
    redis: Option<redis::aio::MultiplexedConnection>,
    /// (highest token accepted, value)
    memory: Mutex<(u64, String)>,
}

impl Storage {
    async fn write(&self, key: &str, value: &str, token: u64) -> Result<FencedWrite, BoxError> {
        if let Some(conn) = &self.redis {
            // Compare and set in one script: no other write can come in between.
            let (written, highest): (i64, u64) = redis::Script::new(REDIS_FENCED_SET)
                .key(key)
                .arg(token)
                .arg(value)
                .invoke_async(&mut conn.clone())
                .await?;
            return Ok(if written == 1 {
                FencedWrite::Written
            } else {
                FencedWrite::Stale { highest }
            });
        }
        let mut resource = self.memory.lock().unwrap();
        if token < resource.0 {
            return Ok(FencedWrite::Stale {
                highest: resource.0,
            });
        }
        *resource = (token, value.to_owned());
        Ok(FencedWrite::Written)
    }

    async fn read(&self, key: &str) -> Result<String, BoxError> {
        match &self.redis {
            Some(conn) => Ok(redis::cmd("HGET")
                .arg(key)
                .arg("value")
                .query_async(&mut conn.clone())
                .await?),
            None => Ok(self.memory.lock().unwrap().1.clone()),
        }
    }
}

/// B's write, through the attribute: the client hands out tokens (`.fencing(true)`), and the
/// body reads its own with `distlock::current()`.
#[distributed_lock(key = "<resource>", lease = "5s", wait = "10s")]
async fn publish(resource: &str, storage: &Storage, text: &str) -> Result<FencedWrite, BoxError> {
    let token = distlock::current()
        .and_then(|lock| lock.fencing_token())
        .ok_or("the client hands out no fencing token")?;
    println!("B: granted `{resource}` with token {token}; writing");
    storage.write(resource, text, token).await
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var(distlock::LockClient::URL_ENV).unwrap_or_else(|_| "memory://".into());
    let client = LockClient::builder(&url).fencing(true).build().await?;
    distlock::init(client.clone())?;
    let redis = if url.starts_with("redis://") {
        Some(
            redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?,
        )
    } else {
        None
    };
    let storage = Storage {
        redis,
        memory: Mutex::new((0, String::new())),
    };
    let resource = format!("report:example-{}", std::process::id());
    let started = Instant::now();

    // A: a short lease, not renewed — as if its renewals stopped while it was paused.
    let a = client
        .lock(&resource)
        .lease(Duration::from_secs(1))
        .renew(false)
        .acquire()
        .await?;
    let token_a = a.fencing_token().ok_or("no fencing token")?;
    println!("A: granted `{resource}` with token {token_a}");
    let first = storage.write(&resource, "written by A", token_a).await?;
    println!("A: first write: {first:?}");

    // A pauses here. Meanwhile its lease runs out and B is granted the lock.
    let by_b = publish(&resource, &storage, "written by B").await?;
    println!(
        "B: write: {by_b:?} ({:.1?} after A's grant)",
        started.elapsed()
    );

    // A resumes, unaware, and writes with its old token.
    println!(
        "A: resumes (its guard says lost: {}) and writes with token {token_a}",
        a.is_lost()
    );
    let late = storage.write(&resource, "A's late write", token_a).await?;
    let value = storage.read(&resource).await?;
    println!("A: late write: {late:?}; the resource holds {value:?}");
    let _ = a.release().await; // Err(Lost): it was no longer A's
    if let Some(conn) = &storage.redis {
        let _: i64 = redis::cmd("DEL")
            .arg(&resource)
            .query_async(&mut conn.clone())
            .await?;
    }

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
