//! The lock client `#[distributed_lock]` functions use when they name none: the task's
//! ([`with_client`]), else the process-wide one ([`init`]).

use std::future::Future;
use std::sync::OnceLock;

use crate::client::LockClient;
use crate::error::LockError;

static GLOBAL: OnceLock<LockClient> = OnceLock::new();

/// The environment variable [`init_from_env`] reads.
pub(crate) const URL_ENV: &str = "DISTLOCK_URL";

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

tokio::task_local! {
    /// The client of [`with_client`]'s future.
    static TASK_CLIENT: LockClient;
}

/// Runs `future` with `client` as the lock client of every `#[distributed_lock]` function it
/// calls (and awaits) that names no `client = …`, instead of the global one: a test runs
/// against a backend of its own — each `#[tokio::test]` its own `memory://`, in parallel —
/// with no global to initialise, and a service can point one part of its work at another
/// store.
///
/// It follows the future, not the thread: a task spawned inside it (`tokio::spawn`) does not
/// inherit it; wrap the spawned future in `with_client` too.
///
/// ```
/// # use distlock_runtime as distlock;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock::LockError> {
/// use distlock::{LockClient, with_client};
///
/// let client = LockClient::connect("memory://a-test-of-its-own").await?;
/// let answer = with_client(&client, async {
///     // `#[distributed_lock]` functions called here take their locks through `client`.
///     42
/// })
/// .await;
/// assert_eq!(answer, 42);
/// # Ok(()) }
/// ```
pub async fn with_client<F: Future>(client: &LockClient, future: F) -> F::Output {
    TASK_CLIENT.scope(client.clone(), future).await
}

/// Fills in the client of an annotated call, unless its `client = …` gave one: the task's
/// ([`with_client`]), else the global one.
pub(crate) fn resolve(client: &mut Option<LockClient>) -> Result<(), LockError> {
    if client.is_none() {
        *client = Some(match TASK_CLIENT.try_with(LockClient::clone) {
            Ok(task) => task,
            Err(_) => self::client()?.clone(),
        });
    }
    Ok(())
}
