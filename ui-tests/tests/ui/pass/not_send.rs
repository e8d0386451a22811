//! The attribute adds no `Send` bound of its own: a body holding an `Rc` across an `.await`
//! compiles and runs (on a current-thread runtime / LocalSet).
use std::rc::Rc;

use distlock::{LockClient, LockError, distributed_lock};

#[distributed_lock(key = "local:<id>")]
async fn local(id: u64) -> Result<usize, LockError> {
    let shared = Rc::new(id);
    tokio::task::yield_now().await;
    Ok(Rc::strong_count(&shared))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    distlock::init(LockClient::connect("memory://").await.unwrap()).unwrap();
    let local_set = tokio::task::LocalSet::new();
    let count = local_set.run_until(async { tokio::task::spawn_local(local(1)).await }).await;
    assert_eq!(count.unwrap().unwrap(), 1);
}
