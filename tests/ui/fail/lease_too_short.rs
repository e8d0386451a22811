use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "a", lease = "5ms")]
async fn too_short() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
