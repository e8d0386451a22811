use std::sync::Arc;

use distlock::{LockClient, LockError, distributed_lock};

struct Account {
    id: u64,
    balance: i64,
}

impl Account {
    #[distributed_lock(key = "account:<self.id>")]
    async fn balance(&self) -> Result<i64, LockError> {
        Ok(self.balance)
    }

    #[distributed_lock(key = "account:<self.id>")]
    async fn deposit(&mut self, amount: i64) -> Result<i64, LockError> {
        self.balance += amount;
        Ok(self.balance)
    }

    #[distributed_lock(key = "account:<self.id>")]
    async fn shared(self: Arc<Self>) -> Result<i64, LockError> {
        Ok(self.balance)
    }

    #[distributed_lock(key = "account:<self.id>")]
    async fn close(self) -> Result<i64, LockError> {
        Ok(self.balance)
    }

    #[distributed_lock(key = "account:<id>")]
    async fn associated(id: u64) -> Result<u64, LockError> {
        Ok(id)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    distlock::init(LockClient::connect("memory://").await.unwrap()).unwrap();
    let mut account = Account { id: 1, balance: 10 };
    assert_eq!(account.balance().await.unwrap(), 10);
    assert_eq!(account.deposit(5).await.unwrap(), 15);
    assert_eq!(Account::associated(2).await.unwrap(), 2);
    let account = Arc::new(account);
    assert_eq!(account.clone().shared().await.unwrap(), 15);
    let account = Arc::try_unwrap(account).ok().unwrap();
    assert_eq!(account.close().await.unwrap(), 15);
}
