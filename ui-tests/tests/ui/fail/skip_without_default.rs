use distlock::{LockError, distributed_lock};

struct Receipt(u64);

// A skipped call returns `Ok(Default::default())`: `Receipt` has no `Default`.
#[distributed_lock(key = "order:<id>", on_busy = "skip")]
async fn pay(id: u64) -> Result<Receipt, LockError> {
    Ok(Receipt(id))
}

fn main() {}
