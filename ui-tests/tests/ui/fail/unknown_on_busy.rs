use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "order:<id>", on_busy = "skipp")]
async fn job(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {}
