use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "a", lease = "0s")]
async fn zero() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
