use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "shard:<self.id>")]
async fn free_function(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
