//! Order ids: several workers each read the highest order id from shared storage, add one and
//! write it back. The read and the write are separate steps, so without the lock two workers
//! would hand out the same id. At the end every id is checked to be unique.
//!
//! ```text
//! cargo run --example orders                                   # memory://, in one process
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example orders
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example orders -- --processes 4
//! DISTLOCK_URL=redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 cargo run --example orders
//! DISTLOCK_URL=redis+cluster://127.0.0.1:7000,127.0.0.1:7001 cargo run --example orders
//! DISTLOCK_URL=postgres://user:pass@127.0.0.1:5432/app \
//!     cargo run --features postgres --example orders -- --processes 3
//! DISTLOCK_URL=mysql://user:pass@127.0.0.1:3306/app \
//!     cargo run --features mysql --example orders -- --processes 3
//! DISTLOCK_URL=zk://127.0.0.1:2181/distlock \
//!     cargo run --features zookeeper --example orders -- --processes 3
//! ```
//!
//! With Redis the shared storage is a Redis key too, so the workers can be separate processes
//! (`--processes N` starts N copies of this program and checks their ids together). With
//! PostgreSQL or MySQL it is a row, and every id is also inserted into a table whose primary key is the
//! id: a duplicate would fail the insert, as in the founding material's lock-table design.
//! With ZooKeeper the value is a node's data and every id a node (created once, or refused).

#[path = "support/store.rs"]
mod store;

use std::collections::BTreeSet;
use std::time::Instant;

use distlock::distributed_lock;
use store::{BoxError, Store};

const WORKERS: usize = 8;
const ORDERS_PER_WORKER: usize = 25;

/// Hands out the next order id: read, add one, write back — only while this process holds the
/// lock `order-id`, cluster-wide.
#[distributed_lock(key = "order-id", lease = "10s", wait = "30s")]
async fn next_order_id(store: &Store) -> Result<u64, BoxError> {
    let last = store.get("last-order-id").await?;
    tokio::task::yield_now().await; // give a racing worker every chance to interleave
    store.set("last-order-id", last + 1).await?;
    store.record_order(last + 1).await?;
    Ok(last + 1)
}

async fn run_workers(store: &Store) -> Result<Vec<u64>, BoxError> {
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::with_capacity(ORDERS_PER_WORKER);
            for _ in 0..ORDERS_PER_WORKER {
                ids.push(next_order_id(&store).await?);
            }
            Ok::<_, BoxError>(ids)
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.extend(task.await??);
    }
    Ok(ids)
}

/// Checks the ids are exactly 1..=expected, each once.
fn verify(ids: &[u64], expected: usize) -> Result<(), String> {
    let unique: BTreeSet<u64> = ids.iter().copied().collect();
    if unique.len() != ids.len() {
        return Err(format!(
            "{} duplicate order ids among {}",
            ids.len() - unique.len(),
            ids.len()
        ));
    }
    if ids.len() != expected || unique.last() != Some(&(expected as u64)) {
        return Err(format!(
            "expected ids 1..={expected}, got {} ids",
            ids.len()
        ));
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value_of = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let processes = value_of("--processes")
        .map(|n| {
            n.parse::<usize>()
                .map_err(|_| format!("--processes takes a number, got {n:?}"))
        })
        .transpose()?;
    // Set in the child processes `--processes` starts: the namespace of the parent's run.
    let worker_of = value_of("--worker-of").cloned();

    let url = store::init_lock_client(worker_of.is_some()).await?;
    let client = distlock::client()?;
    let namespace = worker_of
        .clone()
        .unwrap_or_else(|| format!("distlock-example:orders:{}", std::process::id()));
    let store = Store::open(&url, &namespace).await?;

    if worker_of.is_some() {
        for id in run_workers(&store).await? {
            println!("id {id}");
        }
        return Ok(());
    }
    if processes.is_some() && matches!(store, Store::Memory(_)) {
        return Err("--processes needs a backend every process can reach: \
                    set DISTLOCK_URL=redis://… (memory:// lives inside one process)"
            .into());
    }

    let started = Instant::now();
    let (ids, expected, how) = match processes {
        Some(n) => (
            run_processes(n, &namespace).await?,
            n * WORKERS * ORDERS_PER_WORKER,
            format!("{n} processes × {WORKERS} workers"),
        ),
        None => (
            run_workers(&store).await?,
            WORKERS * ORDERS_PER_WORKER,
            format!("{WORKERS} workers"),
        ),
    };
    let elapsed = started.elapsed();
    store.clear(&["last-order-id"]).await?;
    verify(&ids, expected).map_err(|e| format!("order ids are NOT unique: {e}"))?;
    println!(
        "backend {} ({}): {how} handed out {} order ids in {elapsed:.2?}, every id unique (1..={expected})",
        client.backend_kind(),
        client.url(),
        ids.len(),
    );
    Ok(())
}

/// Starts `n` copies of this program on the same Redis and collects their ids.
async fn run_processes(n: usize, namespace: &str) -> Result<Vec<u64>, BoxError> {
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for _ in 0..n {
        children.push(
            tokio::process::Command::new(&exe)
                .args(["--worker-of", namespace])
                .stdout(std::process::Stdio::piped())
                // A worker must not outlive a run that failed half-way.
                .kill_on_drop(true)
                .spawn()?,
        );
    }
    let mut ids = Vec::new();
    for child in children {
        let output = child.wait_with_output().await?;
        if !output.status.success() {
            return Err(format!("a worker process failed: {}", output.status).into());
        }
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            if let Some(id) = line.strip_prefix("id ") {
                ids.push(id.parse()?);
            }
        }
    }
    Ok(ids)
}
