use std::time::Duration;

use distlock::{LockError, distributed_lock};

/// A nightly export that must never hold its lock past an hour, however it hangs.
#[distributed_lock(key = "job:export", lease = "30s", max_hold = "1h")]
async fn export() -> Result<(), LockError> {
    Ok(())
}

const CAP: Duration = Duration::from_secs(600);

#[distributed_lock(key = "job:<name>", max_hold = CAP, min_hold = "5s", on_lost = "continue")]
async fn from_code(name: &str) -> Result<(), LockError> {
    let _ = name;
    Ok(())
}

#[distributed_lock(key = ["a:<x>", "b:<x>"], lease = "10s", max_hold = "10s")]
async fn a_set(x: u32) -> Result<(), LockError> {
    let _ = x;
    Ok(())
}

fn main() {
    let _ = (export(), from_code("x"), a_set(1));
}
