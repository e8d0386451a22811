//! Order ids: several workers each read the highest order id, add one and write it back. The
//! read and the write are separate steps, so without the lock two workers would hand out the
//! same id. Every id is also added to a set that refuses a duplicate, and at the end the ids are
//! checked to be exactly 1..=N.
//!
//! ```text
//! cargo run --example orders                                   # memory://, in one process
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example orders
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run --example orders -- --processes 4
//! DISTLOCK_URL=redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 cargo run --example orders
//! ```
//!
//! The workers are tasks of this process and the ids are kept in it, whatever store holds the
//! locks. With `--processes N` the workers are N copies of this program, and the ids they share
//! live in Redis: the keys `distlock-example:orders:<pid>:last-order-id` and
//! `distlock-example:orders:<pid>:orders` on the server of the `redis://` URL (on the first
//! node of a `redlock://` one), deleted at the end of the run.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use distlock::{BoxError, LockClient, distributed_lock};

const WORKERS: usize = 8;
const ORDERS_PER_WORKER: usize = 25;

/// The last order id, and every id handed out.
#[derive(Default)]
struct Ids {
    last: u64,
    handed_out: BTreeSet<u64>,
}

/// Hands out the next order id: read, add one, write back, only while this process holds the
/// lock `order-id`, cluster-wide.
#[distributed_lock(key = "order-id", lease = "10s", wait = "30s")]
async fn next_order_id(ids: &Mutex<Ids>) -> Result<u64, BoxError> {
    let last = ids.lock().unwrap().last;
    tokio::task::yield_now().await; // give a racing worker every chance to interleave
    let mut ids = ids.lock().unwrap();
    ids.last = last + 1;
    if !ids.handed_out.insert(last + 1) {
        return Err(format!("order id {} was handed out twice", last + 1).into());
    }
    Ok(last + 1)
}

/// The same, with the ids in Redis keys under `namespace`, for workers in separate processes.
#[distributed_lock(key = "order-id", lease = "10s", wait = "30s")]
async fn next_shared_order_id(
    redis: &redis::aio::MultiplexedConnection,
    namespace: &str,
) -> Result<u64, BoxError> {
    let mut redis = redis.clone();
    let last: Option<u64> = redis::cmd("GET")
        .arg(format!("{namespace}:last-order-id"))
        .query_async(&mut redis)
        .await?;
    let id = last.unwrap_or(0) + 1;
    // One MULTI/EXEC: both written, or (the body dropped) neither.
    let ((), added): ((), u64) = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg(format!("{namespace}:last-order-id"))
        .arg(id)
        .cmd("SADD")
        .arg(format!("{namespace}:orders"))
        .arg(id)
        .query_async(&mut redis)
        .await?;
    if added == 0 {
        return Err(format!("order id {id} was handed out twice").into());
    }
    Ok(id)
}

/// Runs the workers, each taking its ids one after the other from `next`.
async fn run_workers<F, Fut>(next: F) -> Result<Vec<u64>, BoxError>
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<u64, BoxError>> + Send + 'static,
{
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::with_capacity(ORDERS_PER_WORKER);
            for _ in 0..ORDERS_PER_WORKER {
                ids.push(next().await?);
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

/// The Redis server that keeps the ids shared by processes: the `redis://` URL's, or the first
/// node of a `redlock://` URL.
async fn shared_redis(url: &str) -> Result<redis::aio::MultiplexedConnection, BoxError> {
    let server = match url.split_once("://") {
        Some(("redis", _)) => url.to_owned(),
        Some(("redlock", nodes)) => format!("redis://{}", nodes.split(',').next().unwrap()),
        _ => {
            return Err("--processes needs storage every process can reach: \
                        set DISTLOCK_URL=redis://… (memory:// lives inside one process)"
                .into());
        }
    };
    Ok(redis::Client::open(server)?
        .get_multiplexed_async_connection()
        .await?)
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
    // Given to the copies `--processes` starts: the Redis namespace of the run's ids.
    let worker_of = value_of("--worker-of").cloned();

    let url = std::env::var(LockClient::URL_ENV).unwrap_or_else(|_| {
        println!(
            "DISTLOCK_URL is not set: using the embedded memory:// backend (one process only)"
        );
        "memory://".into()
    });
    let client = LockClient::connect(&url).await?;
    distlock::init(client.clone())?;

    if let Some(namespace) = worker_of {
        // A copy started by `--processes`: its workers' ids, one per line, to the parent.
        let redis = shared_redis(&url).await?;
        let ids = run_workers(move || {
            let (redis, namespace) = (redis.clone(), namespace.clone());
            async move { next_shared_order_id(&redis, &namespace).await }
        })
        .await?;
        for id in ids {
            println!("id {id}");
        }
        return Ok(());
    }

    let started = Instant::now();
    let (ids, how) = match processes {
        Some(n) => {
            let mut redis = shared_redis(&url).await?;
            let namespace = format!("distlock-example:orders:{}", std::process::id());
            let ids = run_processes(n, &namespace).await;
            let keys = [":last-order-id", ":orders"].map(|k| format!("{namespace}{k}"));
            let _: u64 = redis::cmd("DEL").arg(&keys).query_async(&mut redis).await?;
            (ids?, format!("{n} processes × {WORKERS} workers"))
        }
        None => {
            let ids = Arc::new(Mutex::new(Ids::default()));
            let ids = run_workers(move || {
                let ids = Arc::clone(&ids);
                async move { next_order_id(&ids).await }
            })
            .await?;
            (ids, format!("{WORKERS} workers"))
        }
    };
    let elapsed = started.elapsed();
    // Each id once (the storage refused a duplicate already), and none missing.
    let expected = processes.unwrap_or(1) * WORKERS * ORDERS_PER_WORKER;
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
