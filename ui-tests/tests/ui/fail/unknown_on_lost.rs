use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "a", on_lost = "retry")]
async fn unknown() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
