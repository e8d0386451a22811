use distlock::{LockError, distributed_lock};

const LEASE_SECS: u64 = 10;

// A duration from code must be a `Duration`: the error points at the expression.
#[distributed_lock(key = "order:<id>", lease = LEASE_SECS)]
async fn job(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
