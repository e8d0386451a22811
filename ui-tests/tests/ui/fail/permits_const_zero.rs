use distlock::{LockError, distributed_lock};

const NONE: u16 = 0;

#[distributed_lock(key = "gpu", permits = NONE)]
async fn no_gpus() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = no_gpus();
}
