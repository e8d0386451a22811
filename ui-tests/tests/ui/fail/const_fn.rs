use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "order:<id>")]
const fn constant(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
