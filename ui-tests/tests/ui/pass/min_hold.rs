use distlock::{LockError, distributed_lock};

/// A job started on every node's timer each minute: it runs once per minute across the
/// cluster even when the nodes' clocks differ by seconds.
#[distributed_lock(key = "job:report", wait = "0s", lease = "2m", min_hold = "55s")]
async fn report() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job:<name>", lease = "10s", min_hold = "10s", mode = "read")]
async fn as_long_as_the_lease(name: &str) -> Result<(), LockError> {
    let _ = name;
    Ok(())
}

#[distributed_lock(key = ["a:<x>", "b:<x>"], min_hold = "1s")]
async fn a_set(x: u32) -> Result<(), LockError> {
    let _ = x;
    Ok(())
}

fn main() {
    let _ = (report(), as_long_as_the_lease("x"), a_set(1));
}
