use distlock::{LockClient, LockError, distributed_lock};

trait Inventory {
    async fn reserve(&self, sku: &str, count: u32) -> Result<u32, LockError>;

    #[distributed_lock(key = "inventory:default")]
    async fn provided(&self) -> Result<u32, LockError> {
        Ok(0)
    }
}

struct Store {
    stock: u32,
}

impl Inventory for Store {
    #[distributed_lock(key = "inventory:<sku>", lease = "5s")]
    async fn reserve(&self, sku: &str, count: u32) -> Result<u32, LockError> {
        Ok(self.stock.saturating_sub(count))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    distlock::init(LockClient::connect("memory://").await.unwrap()).unwrap();
    let store = Store { stock: 10 };
    assert_eq!(store.reserve("sku-1", 3).await.unwrap(), 7);
    assert_eq!(store.provided().await.unwrap(), 0);
}
