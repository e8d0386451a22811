use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "a", mode = "reed")]
async fn misspelled() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "b", mode = "shared")]
async fn unknown() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "c", mode = "read", fair = true)]
async fn fair_reader() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
