use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "a", lease = "10")]
async fn no_unit() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "b", wait = "soon")]
async fn not_a_number() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "c", lease = "3d")]
async fn unknown_unit() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
