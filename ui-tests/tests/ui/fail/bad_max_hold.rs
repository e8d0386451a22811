use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "a", lease = "10s", max_hold = "9s")]
async fn shorter_than_the_lease() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "b", max_hold = 5)]
async fn not_a_string() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "c", max_hold = "later")]
async fn not_a_duration() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "d", max_hold = "2000h")]
async fn longer_than_kept() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
