use std::time::Duration;

use distlock::{LockClient, LockError, distributed_lock, with_client};

/// One computation for every caller within a minute.
#[distributed_lock(key = "rate:<currency>", share = "60s")]
async fn rate(currency: String) -> Result<(String, u64), LockError> {
    Ok((currency, 7))
}

const SHARE: Duration = Duration::from_secs(5);

#[distributed_lock(key = ["a:<x>", "b:<y>"], share = SHARE, lease = Duration::from_secs(3))]
async fn pair(x: u32, y: u32) -> anyhow::Result<Vec<u32>> {
    Ok(vec![x, y])
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = LockClient::connect("memory://").await.unwrap();
    with_client(&client, async {
        assert_eq!(rate("EUR".into()).await.unwrap(), ("EUR".to_owned(), 7));
        assert_eq!(pair(1, 2).await.unwrap(), vec![1, 2]);
    })
    .await;
}
