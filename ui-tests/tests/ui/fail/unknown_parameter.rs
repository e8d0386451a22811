use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "order:<order_idd>")]
async fn misspelt(order_id: u64, customer: &str) -> Result<u64, LockError> {
    let _ = customer;
    Ok(order_id)
}

fn main() {}
