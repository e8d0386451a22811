use distlock::distributed_lock;

#[derive(Debug)]
struct StorageError;

#[distributed_lock(key = "order:<id>")]
async fn no_from_lock_error(id: u64) -> Result<u64, StorageError> {
    Ok(id)
}

fn main() {}
