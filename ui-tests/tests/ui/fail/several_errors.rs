use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "order:<idd>:<>", lease = "fast", on_lost = "panic", colour = "red")]
async fn many_mistakes(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
