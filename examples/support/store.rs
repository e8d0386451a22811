#![allow(dead_code)] // each example uses part of this module
//! Shared storage for the examples: named integers that every worker reads and writes in two
//! separate steps (so, without the lock, updates would be lost). In one process it is a map;
//! with Redis it is Redis keys, so workers can be separate processes. With `redlock://` the data
//! lives on the first node (the lock is across all of them); with `redis+cluster://` in the
//! cluster.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Mutex;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone)]
pub enum Store {
    Memory(Arc<Mutex<HashMap<String, u64>>>),
    Redis {
        conn: Conn,
        /// Prefix of this run's keys, so runs never see each other's data.
        namespace: String,
    },
}

impl Store {
    /// A map in this process for `memory://`, otherwise Redis keys under `namespace`.
    pub async fn open(url: &str, namespace: &str) -> Result<Store, BoxError> {
        if url.starts_with("memory://") {
            return Ok(Store::Memory(Arc::default()));
        }
        let conn = match url.split_once("://") {
            Some(("redis+cluster", nodes)) => Conn::Cluster(
                redis::cluster::ClusterClient::new(
                    nodes
                        .split(',')
                        .map(|n| format!("redis://{n}"))
                        .collect::<Vec<_>>(),
                )?
                .get_async_connection()
                .await?,
            ),
            Some(("redlock", nodes)) => {
                let first = nodes.split(',').next().unwrap_or_default();
                Conn::Single(
                    redis::Client::open(format!("redis://{first}"))?
                        .get_multiplexed_async_connection()
                        .await?,
                )
            }
            _ => Conn::Single(
                redis::Client::open(url)?
                    .get_multiplexed_async_connection()
                    .await?,
            ),
        };
        Ok(Store::Redis {
            conn,
            namespace: namespace.to_owned(),
        })
    }

    pub async fn get(&self, name: &str) -> Result<u64, BoxError> {
        Ok(match self {
            Store::Memory(map) => map.lock().await.get(name).copied().unwrap_or(0),
            Store::Redis { conn, namespace } => {
                let value: Option<u64> = conn
                    .query(redis::cmd("GET").arg(format!("{namespace}:{name}")))
                    .await?;
                value.unwrap_or(0)
            }
        })
    }

    pub async fn set(&self, name: &str, value: u64) -> Result<(), BoxError> {
        match self {
            Store::Memory(map) => {
                map.lock().await.insert(name.to_owned(), value);
            }
            Store::Redis { conn, namespace } => {
                let () = conn
                    .query(
                        redis::cmd("SET")
                            .arg(format!("{namespace}:{name}"))
                            .arg(value),
                    )
                    .await?;
            }
        }
        Ok(())
    }

    /// Deletes this run's keys (Redis); nothing to do in memory.
    pub async fn clear(&self, names: &[&str]) -> Result<(), BoxError> {
        if let Store::Redis { conn, namespace } = self {
            for name in names {
                let _: i64 = conn
                    .query(redis::cmd("DEL").arg(format!("{namespace}:{name}")))
                    .await?;
            }
        }
        Ok(())
    }
}

/// A connection to one Redis server or to a Redis Cluster.
#[derive(Clone)]
pub enum Conn {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Conn {
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        match self.clone() {
            Conn::Single(mut conn) => cmd.query_async(&mut conn).await,
            Conn::Cluster(mut conn) => cmd.query_async(&mut conn).await,
        }
    }
}

/// Reads `DISTLOCK_URL` (or falls back to `memory://`, saying so) and installs the global lock
/// client. Returns the URL.
pub async fn init_lock_client(quiet: bool) -> Result<String, BoxError> {
    let url = match std::env::var(distlock::URL_ENV) {
        Ok(url) => url,
        Err(_) => {
            if !quiet {
                println!(
                    "DISTLOCK_URL is not set: using the embedded memory:// backend (one process only)"
                );
            }
            "memory://".to_string()
        }
    };
    distlock::init(distlock::LockClient::connect(&url).await?)?;
    Ok(url)
}
