use distlock::{LockError, distributed_lock};

#[distributed_lock(key = 42, renew = "yes", crate = "not a path")]
async fn wrong_types() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
