use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "a", permits = 0)]
async fn no_permits() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "b", permits = 4, mode = "read")]
async fn read_permits() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "c", permits = "4")]
async fn quoted() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "d", permits = 99999999999)]
async fn too_many() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "e", permits = 2, fair = true)]
async fn fair_permits() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
