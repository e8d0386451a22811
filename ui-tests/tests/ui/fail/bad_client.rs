use distlock::{LockError, distributed_lock};

// Not a client: the error points at the expression.
#[distributed_lock(key = "order:<id>", client = 42)]
async fn a_number(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
