use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "a", lease = "10s", min_hold = "11s")]
async fn longer_than_the_lease() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "b", min_hold = 5)]
async fn not_a_string() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "c", min_hold = "soon")]
async fn not_a_duration() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "d", min_hold = "200h")]
async fn longer_than_any_lease() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
