use std::time::Duration;

use distlock::{LockClient, LockError, distributed_lock};

#[distributed_lock(key = "order:<id>")]
async fn defaults(id: u64) -> Result<u64, LockError> {
    Ok(id + 1)
}

#[distributed_lock(
    key = "order:<id>:<<literal>>:{braces}",
    lease = "1500ms",
    wait = "forever",
    renew = false,
    on_lost = "continue",
    fencing = true,
    crate = "distlock",
)]
async fn every_argument(id: u64) -> Result<String, LockError> {
    let _ = id;
    Ok(distlock::current().unwrap().key().to_owned())
}

#[distributed_lock(key = "job", wait = "0s", lease = "2m")]
async fn constant_key() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "user:<user.id>:<pair.1>", wait = "1h", lease = "1h")]
async fn field_paths(user: User, pair: (u8, &str)) -> Result<(), LockError> {
    let _ = (user.id, pair);
    Ok(())
}

#[distributed_lock(key = "destructured:<a>:<b>")]
async fn destructured((a, b): (u32, u32), mut c: u32) -> Result<u32, LockError> {
    c += a + b;
    Ok(c)
}

struct User {
    id: u64,
}

mod renamed {
    pub use distlock as locks;
}

#[distributed_lock(key = "renamed:<id>", crate = "renamed::locks")]
async fn through_a_renamed_crate(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn assert_send<T: Send>(_: &T) {}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    distlock::init(LockClient::connect("memory://").await.unwrap()).unwrap();
    let call = defaults(1);
    assert_send(&call);
    assert_eq!(call.await.unwrap(), 2);
    assert_eq!(every_argument(7).await.unwrap(), "order:7:<literal>:{braces}");
    constant_key().await.unwrap();
    field_paths(User { id: 3 }, (1, "x")).await.unwrap();
    assert_eq!(destructured((1, 2), 3).await.unwrap(), 6);
    assert_eq!(through_a_renamed_crate(5).await.unwrap(), 5);
    let _ = Duration::ZERO;
}
