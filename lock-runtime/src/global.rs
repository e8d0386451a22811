//! The process-wide lock client that `#[distributed_lock]` functions use.

use std::sync::OnceLock;

use crate::client::LockClient;
use crate::error::LockError;

static GLOBAL: OnceLock<LockClient> = OnceLock::new();

/// The environment variable [`init_from_env`] reads.
pub const URL_ENV: &str = "DISTLOCK_URL";

/// Installs the global lock client. Call it once at startup; a second call returns
/// [`LockError::AlreadyInitialized`] and leaves the first client in place.
///
/// There is deliberately no implicit fallback: a locked function called before `init` fails
/// with [`LockError::NotInitialized`] instead of taking an in-process lock that would exclude
/// nobody in the other processes.
pub fn init(client: LockClient) -> Result<(), LockError> {
    GLOBAL
        .set(client)
        .map_err(|_| LockError::AlreadyInitialized)
}

/// Connects to the backend named by the `DISTLOCK_URL` environment variable and installs it
/// as the global client.
pub async fn init_from_env() -> Result<(), LockError> {
    if GLOBAL.get().is_some() {
        return Err(LockError::AlreadyInitialized);
    }
    let url = std::env::var(URL_ENV).map_err(|_| {
        LockError::Config(format!(
            "{URL_ENV} is not set (or not UTF-8): set it to the lock backend's URL, \
             e.g. redis://127.0.0.1:6379, or memory:// for a single process"
        ))
    })?;
    init(LockClient::connect(&url).await?)
}

/// The global lock client installed by [`init`].
pub fn client() -> Result<&'static LockClient, LockError> {
    GLOBAL.get().ok_or(LockError::NotInitialized)
}
