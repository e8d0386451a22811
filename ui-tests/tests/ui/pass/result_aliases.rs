//! Any `Result<T, E>` with `E: From<LockError>`, spelled through aliases too.
use distlock::{LockClient, LockError, distributed_lock};

type AppResult<T> = std::result::Result<T, AppError>;

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    NotFound,
}

impl From<LockError> for AppError {
    fn from(error: LockError) -> Self {
        AppError::Lock(error)
    }
}

#[distributed_lock(key = "anyhow:<id>")]
async fn with_anyhow(id: u64) -> anyhow::Result<u64> {
    anyhow::ensure!(id > 0, "id must be positive");
    Ok(id)
}

#[distributed_lock(key = "alias:<id>")]
async fn with_alias(id: u64) -> AppResult<u64> {
    if id == 0 {
        return Err(AppError::NotFound);
    }
    Ok(id)
}

#[distributed_lock(key = "boxed:<id>")]
async fn with_boxed_error(id: u64) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
    let parsed: u64 = "7".parse()?;
    Ok(id + parsed)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    distlock::init(LockClient::connect("memory://").await.unwrap()).unwrap();
    assert_eq!(with_anyhow(1).await.unwrap(), 1);
    assert!(with_anyhow(0).await.is_err());
    assert_eq!(with_alias(2).await.unwrap(), 2);
    assert!(matches!(with_alias(0).await, Err(AppError::NotFound)));
    assert_eq!(with_boxed_error(1).await.unwrap(), 8);
    let _ = AppError::Lock(LockError::NotInitialized);
}
