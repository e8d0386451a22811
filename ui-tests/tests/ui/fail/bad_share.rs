use distlock::{LockError, distributed_lock};

#[distributed_lock(key = "a:<id>", share = "0s")]
async fn zero(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "b:<id>", share = "9000h")]
async fn too_long(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "c:<id>", mode = "read", share = "60s")]
async fn read(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "d:<id>", permits = 2, share = "60s")]
async fn permit(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
