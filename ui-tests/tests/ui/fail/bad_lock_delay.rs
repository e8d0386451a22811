use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "a", lock_delay = "200h")]
async fn longer_than_any_lease() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "b", lock_delay = "soon")]
async fn not_a_duration() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "c", lock_delay = 5)]
async fn not_a_string() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
