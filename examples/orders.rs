//! Order ids: several workers each read the highest order id from shared storage, add one and
//! write it back. The read and the write are separate steps, so without the lock two workers
//! would hand out the same id. Every id is also added to a set that refuses a duplicate, and at
//! the end the ids are checked to be exactly 1..=N.
//!
//! ```text
//! cargo run --example orders                                   # memory://, in one process
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example orders
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example orders -- --processes 4
//! DISTLOCK_URL=redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 cargo run --example orders
//! ```
//!
//! With `redis://` (or `redlock://`, on its first node) the ids live in Redis keys too, so the
//! workers can be separate processes: `--processes N` starts N copies of this program and checks
//! their ids together. With any other backend the locks are there and the ids in this process.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use distlock::{BoxError, LockClient, distributed_lock};

const WORKERS: usize = 8;
const ORDERS_PER_WORKER: usize = 25;

/// The last order id and every id handed out: Redis keys `<namespace>:last-order-id` and the
/// set `<namespace>:orders`, or the same in this process.
#[derive(Clone)]
enum Storage {
    Memory(Arc<Mutex<(u64, BTreeSet<u64>)>>),
    Redis(redis::aio::MultiplexedConnection, String),
}

impl Storage {
    async fn open(url: &str, namespace: &str) -> Result<Storage, BoxError> {
        let server = match url.split_once("://") {
            Some(("redis", _)) => url.to_owned(),
            Some(("redlock", nodes)) => format!("redis://{}", nodes.split(',').next().unwrap()),
            _ => return Ok(Storage::Memory(Arc::default())),
        };
        let client = redis::Client::open(server)?;
        let conn = client.get_multiplexed_async_connection().await?;
        Ok(Storage::Redis(conn, namespace.to_owned()))
    }

    async fn last_id(&self) -> Result<u64, BoxError> {
        Ok(match self {
            Storage::Memory(ids) => ids.lock().unwrap().0,
            Storage::Redis(conn, namespace) => redis::cmd("GET")
                .arg(format!("{namespace}:last-order-id"))
                .query_async::<Option<u64>>(&mut conn.clone())
                .await?
                .unwrap_or(0),
        })
    }

    /// Writes `id` as the last one and adds it to the set, which refuses a duplicate.
    async fn record(&self, id: u64) -> Result<(), BoxError> {
        let fresh = match self {
            Storage::Memory(ids) => {
                let mut ids = ids.lock().unwrap();
                ids.0 = id;
                ids.1.insert(id)
            }
            Storage::Redis(conn, namespace) => {
                // One MULTI/EXEC: both written, or (the body dropped) neither.
                let (_, added): ((), u64) = redis::pipe()
                    .atomic()
                    .cmd("SET")
                    .arg(format!("{namespace}:last-order-id"))
                    .arg(id)
                    .cmd("SADD")
                    .arg(format!("{namespace}:orders"))
                    .arg(id)
                    .query_async(&mut conn.clone())
                    .await?;
                added == 1
            }
        };
        match fresh {
            true => Ok(()),
            false => Err(format!("order id {id} was handed out twice").into()),
        }
    }

    async fn clear(&self) -> Result<(), BoxError> {
        if let Storage::Redis(conn, namespace) = self {
            let keys = [":last-order-id", ":orders"].map(|k| format!("{namespace}{k}"));
            let _: u64 = redis::cmd("DEL")
                .arg(&keys)
                .query_async(&mut conn.clone())
                .await?;
        }
        Ok(())
    }
}

/// Hands out the next order id: read, add one, write back — only while this process holds the
/// lock `order-id`, cluster-wide.
#[distributed_lock(key = "order-id", lease = "10s", wait = "30s")]
async fn next_order_id(storage: &Storage) -> Result<u64, BoxError> {
    let last = storage.last_id().await?;
    tokio::task::yield_now().await; // give a racing worker every chance to interleave
    storage.record(last + 1).await?;
    Ok(last + 1)
}

async fn run_workers(storage: &Storage) -> Result<Vec<u64>, BoxError> {
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let storage = storage.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::with_capacity(ORDERS_PER_WORKER);
            for _ in 0..ORDERS_PER_WORKER {
                ids.push(next_order_id(&storage).await?);
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

    let url = std::env::var(distlock::LockClient::URL_ENV).unwrap_or_else(|_| {
        if worker_of.is_none() {
            println!(
                "DISTLOCK_URL is not set: using the embedded memory:// backend (one process only)"
            );
        }
        "memory://".into()
    });
    let client = LockClient::connect(&url).await?;
    distlock::init(client.clone())?;
    let namespace = worker_of
        .clone()
        .unwrap_or_else(|| format!("distlock-example:orders:{}", std::process::id()));
    let storage = Storage::open(&url, &namespace).await?;

    if worker_of.is_some() {
        for id in run_workers(&storage).await? {
            println!("id {id}");
        }
        return Ok(());
    }
    if processes.is_some() && matches!(storage, Storage::Memory(_)) {
        return Err("--processes needs storage every process can reach: \
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
            run_workers(&storage).await?,
            WORKERS * ORDERS_PER_WORKER,
            format!("{WORKERS} workers"),
        ),
    };
    let elapsed = started.elapsed();
    storage.clear().await?;
    // Each id once (the storage refused a duplicate already), and none missing.
    let unique: BTreeSet<u64> = ids.iter().copied().collect();
    if unique.len() != ids.len() || unique != (1..=expected as u64).collect() {
        return Err(format!("order ids are NOT 1..={expected}, each once: {ids:?}").into());
    }
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
