//! Other attributes stack on either side: `#[tracing::instrument]`, lints, docs, inner
//! attributes.
use distlock::{LockClient, LockError, distributed_lock};

/// Documented.
#[tracing::instrument]
#[distributed_lock(key = "traced:<id>")]
async fn instrumented_outside(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "traced:<id>")]
#[tracing::instrument(skip(id))]
#[allow(clippy::needless_return)]
async fn instrumented_inside(id: u64) -> Result<u64, LockError> {
    #![allow(unused_variables)]
    let unused = 1;
    return Ok(id);
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    distlock::init(LockClient::connect("memory://").await.unwrap()).unwrap();
    assert_eq!(instrumented_outside(1).await.unwrap(), 1);
    assert_eq!(instrumented_inside(2).await.unwrap(), 2);
}
