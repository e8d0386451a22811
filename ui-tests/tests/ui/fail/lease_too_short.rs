use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "a", lease = "5ms")]
async fn too_short() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "b", lease = "200h")]
async fn too_long() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
