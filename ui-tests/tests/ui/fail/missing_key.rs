use distlock::{LockError, distributed_lock};

#[distributed_lock(lease = "10s")]
async fn no_key() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
