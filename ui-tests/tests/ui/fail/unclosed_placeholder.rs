use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "order:<id")]
async fn unclosed(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
