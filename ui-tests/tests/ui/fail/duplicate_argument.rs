use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "order:<id>", lease = "10s", lease = "20s")]
async fn twice(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
