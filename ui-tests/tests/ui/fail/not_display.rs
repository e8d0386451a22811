use distlock::{LockError, distributed_lock};

struct Opaque;

#[distributed_lock(key = "opaque:<value>")]
async fn not_display(value: Opaque) -> Result<(), LockError> {
    let _ = value;
    Ok(())
}

fn main() {}
