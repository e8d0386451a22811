#![allow(dead_code)] // each example uses part of this module
//! Shared storage for the examples: named integers that every worker reads and writes in two
//! separate steps (so, without the lock, updates would be lost). In one process it is a map;
//! with Redis it is Redis keys, so workers can be separate processes.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Mutex;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone)]
pub enum Store {
    Memory(Arc<Mutex<HashMap<String, u64>>>),
    Redis {
        conn: redis::aio::MultiplexedConnection,
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
        let conn = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        Ok(Store::Redis {
            conn,
            namespace: namespace.to_owned(),
        })
    }

    pub async fn get(&self, name: &str) -> Result<u64, BoxError> {
        Ok(match self {
            Store::Memory(map) => map.lock().await.get(name).copied().unwrap_or(0),
            Store::Redis { conn, namespace } => {
                let mut conn = conn.clone();
                let value: Option<u64> = redis::cmd("GET")
                    .arg(format!("{namespace}:{name}"))
                    .query_async(&mut conn)
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
                let mut conn = conn.clone();
                let () = redis::cmd("SET")
                    .arg(format!("{namespace}:{name}"))
                    .arg(value)
                    .query_async(&mut conn)
                    .await?;
            }
        }
        Ok(())
    }

    /// Deletes this run's keys (Redis); nothing to do in memory.
    pub async fn clear(&self, names: &[&str]) -> Result<(), BoxError> {
        if let Store::Redis { conn, namespace } = self {
            let mut conn = conn.clone();
            for name in names {
                let _: i64 = redis::cmd("DEL")
                    .arg(format!("{namespace}:{name}"))
                    .query_async(&mut conn)
                    .await?;
            }
        }
        Ok(())
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
