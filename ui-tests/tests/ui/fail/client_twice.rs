use distlock::{LockClient, LockError, distributed_lock};

struct Service {
    locks: LockClient,
}

impl Service {
    #[distributed_lock(key = "order:<id>", client = self.locks, client = self.locks)]
    async fn twice(&self, id: u64) -> Result<u64, LockError> {
        Ok(id)
    }
}

fn main() {}
