use distlock::{LockError, distributed_lock};

#[distributed_lock("order:<id>")]
async fn positional(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
