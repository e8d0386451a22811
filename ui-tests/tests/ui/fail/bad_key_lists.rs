use distlock::{LockError, distributed_lock};

#[distributed_lock(key = [])]
async fn no_keys() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = ["account:<from>", "account:<from>"])]
async fn twice(from: u32) -> Result<(), LockError> {
    let _ = from;
    Ok(())
}

#[distributed_lock(key = ["account:<from>", 7])]
async fn not_a_string(from: u32) -> Result<(), LockError> {
    let _ = from;
    Ok(())
}

#[distributed_lock(key = ["account:<from>", "account:<too>"])]
async fn unknown_parameter(from: u32, to: u32) -> Result<(), LockError> {
    let _ = (from, to);
    Ok(())
}

#[distributed_lock(key = ["gpu:<a>", "gpu:<b>"], permits = 2)]
async fn semaphore_of_two_keys(a: u32, b: u32) -> Result<(), LockError> {
    let _ = (a, b);
    Ok(())
}

#[distributed_lock(key = ["a:<a>", "b:<b>"], fair = true)]
async fn fair_set(a: u32, b: u32) -> Result<(), LockError> {
    let _ = (a, b);
    Ok(())
}

fn main() {}
