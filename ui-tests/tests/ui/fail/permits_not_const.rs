use distlock::{LockError, distributed_lock};

const WIDE: u32 = 4;

#[distributed_lock(key = "gpu", permits = WIDE)]
async fn wide() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "gpu:<n>", permits = n)]
async fn from_an_argument(n: u16) -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = (wide(), from_an_argument(2));
}
