use std::time::Duration;

use distlock::{LockError, distributed_lock};

/// A payment run that a paused holder must not share with anyone for 5 s past its lease.
#[distributed_lock(key = "job:payments", lease = "10s", lock_delay = "5s")]
async fn payments() -> Result<(), LockError> {
    Ok(())
}

const DELAY: Duration = Duration::from_secs(2);

#[distributed_lock(key = "row:<id>", lock_delay = DELAY, max_hold = "1m")]
async fn from_code(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {
    let _ = (payments(), from_code(1));
}
