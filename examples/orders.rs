//! Order ids: several workers each read the highest order id from shared storage, add one and
//! write it back. The read and the write are separate steps, so without the lock two workers
//! would hand out the same id. At the end every id is checked to be unique.
//!
//! ```text
//! cargo run --example orders                                   # memory://, in one process
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example orders
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example orders -- --processes 4
//! ```
//!
//! With Redis the shared storage is a Redis key too, so the workers can be separate processes
//! (`--processes N` starts N copies of this program and checks their ids together).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::LockClient;
use tokio::sync::Mutex;

const WORKERS: usize = 8;
const ORDERS_PER_WORKER: usize = 25;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where the highest order id lives: process memory, or a Redis key every process shares.
#[derive(Clone)]
enum Storage {
    Memory(Arc<Mutex<u64>>),
    Redis {
        conn: redis::aio::MultiplexedConnection,
        key: String,
    },
}

impl Storage {
    async fn read(&self) -> Result<u64, BoxError> {
        Ok(match self {
            Storage::Memory(value) => *value.lock().await,
            Storage::Redis { conn, key } => {
                let mut conn = conn.clone();
                let value: Option<u64> = redis::cmd("GET").arg(key).query_async(&mut conn).await?;
                value.unwrap_or(0)
            }
        })
    }

    async fn write(&self, id: u64) -> Result<(), BoxError> {
        match self {
            Storage::Memory(value) => *value.lock().await = id,
            Storage::Redis { conn, key } => {
                let mut conn = conn.clone();
                let () = redis::cmd("SET")
                    .arg(key)
                    .arg(id)
                    .query_async(&mut conn)
                    .await?;
            }
        }
        Ok(())
    }
}

/// Hands out the next order id: read, add one, write back — under the lock `order-id`.
async fn next_order_id(storage: &Storage) -> Result<u64, BoxError> {
    let guard = distlock::client()?
        .lock("order-id")
        .lease(Duration::from_secs(10))
        .wait(Duration::from_secs(30))
        .acquire()
        .await?;
    let last = storage.read().await?;
    tokio::task::yield_now().await; // give a racing worker every chance to interleave
    storage.write(last + 1).await?;
    guard.release().await?;
    Ok(last + 1)
}

async fn run_workers(storage: &Storage, workers: usize) -> Result<Vec<u64>, BoxError> {
    let mut tasks = Vec::new();
    for _ in 0..workers {
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
    if ids.len() != expected
        || unique.first() != Some(&1)
        || unique.last() != Some(&(expected as u64))
    {
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
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(|v| {
                v.parse::<usize>()
                    .map_err(|_| format!("{name} takes a number, got {v:?}"))
            })
            .transpose()
    };
    let processes = flag("--processes")?;
    let storage_key = args
        .iter()
        .position(|a| a == "--worker-of")
        .and_then(|i| args.get(i + 1))
        .cloned();

    let url = match std::env::var(distlock::URL_ENV) {
        Ok(url) => url,
        Err(_) => {
            if storage_key.is_none() {
                println!(
                    "DISTLOCK_URL is not set: using the embedded memory:// backend (one process only)"
                );
            }
            "memory://".to_string()
        }
    };
    distlock::init(LockClient::connect(&url).await?)?;
    let client = distlock::client()?;

    let storage = if client.backend_kind() == "memory" {
        if processes.is_some() {
            return Err("--processes needs a backend every process can reach: \
                        set DISTLOCK_URL=redis://… (memory:// lives inside one process)"
                .into());
        }
        Storage::Memory(Arc::new(Mutex::new(0)))
    } else {
        let key = storage_key
            .clone()
            .unwrap_or_else(|| format!("distlock-example:orders:{}:last-id", std::process::id()));
        let conn = redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        Storage::Redis { conn, key }
    };

    // A child process: allocate ids and print them for the parent.
    if storage_key.is_some() {
        for id in run_workers(&storage, WORKERS).await? {
            println!("id {id}");
        }
        return Ok(());
    }

    let started = Instant::now();
    let (ids, expected, how) = match (processes, &storage) {
        (Some(n), Storage::Redis { key, .. }) => (
            run_processes(n, key).await?,
            n * WORKERS * ORDERS_PER_WORKER,
            format!("{n} processes × {WORKERS} workers"),
        ),
        _ => (
            run_workers(&storage, WORKERS).await?,
            WORKERS * ORDERS_PER_WORKER,
            format!("{WORKERS} workers"),
        ),
    };
    let elapsed = started.elapsed();
    if let Storage::Redis { conn, key } = &storage {
        let mut conn = conn.clone();
        let _: i64 = redis::cmd("DEL").arg(key).query_async(&mut conn).await?;
    }
    verify(&ids, expected).map_err(|e| format!("order ids are NOT unique: {e}"))?;
    println!(
        "backend {} ({}): {how} handed out {} order ids in {elapsed:.2?}, every id unique (1..={})",
        client.backend_kind(),
        client.url(),
        ids.len(),
        ids.len()
    );
    Ok(())
}

/// Starts `n` copies of this program on the same Redis and collects their ids.
async fn run_processes(n: usize, key: &str) -> Result<Vec<u64>, BoxError> {
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for _ in 0..n {
        children.push(
            tokio::process::Command::new(&exe)
                .args(["--worker-of", key])
                .stdout(std::process::Stdio::piped())
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
