use distlock::{LockError, distributed_lock};

/// The pool's size, one place for the attribute and the code around it.
const GPUS: u16 = 4;

#[distributed_lock(key = "gpu:<pool>", permits = GPUS)]
async fn train(pool: &str) -> Result<(), LockError> {
    let _ = pool;
    Ok(())
}

#[distributed_lock(key = "gpu-pairs:<pool>", permits = GPUS / 2)]
async fn pairs(pool: &str) -> Result<(), LockError> {
    let _ = pool;
    Ok(())
}

struct Workers;

impl Workers {
    const AT_ONCE: u16 = 3;

    #[distributed_lock(key = "workers", permits = Self::AT_ONCE)]
    async fn work(&self) -> Result<(), LockError> {
        Ok(())
    }
}

fn main() {
    let _ = (train("a"), pairs("a"), Workers.work());
}
