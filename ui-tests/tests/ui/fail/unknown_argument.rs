use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "order:<id>", leese = "10s")]
async fn typo(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
