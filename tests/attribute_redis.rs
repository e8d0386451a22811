//! `#[distributed_lock]` against a real `redis-server`: one server and one global client for
//! every test of this binary, each test on its own runtime.

#[path = "attribute/cases.rs"]
mod cases;

mod backend {
    use std::time::Duration;

    use support::RedisServer;

    pub async fn setup() {
        static INIT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
        INIT.get_or_init(|| async {
            let client = distlock::LockClient::connect(&RedisServer::shared().url())
                .await
                .expect("connect to the shared redis-server");
            distlock::init(client).expect("first init");
        })
        .await;
    }

    pub async fn holder(name: &str) -> Option<String> {
        RedisServer::shared().get(name).await
    }

    /// How long the server keeps backend key `name` (its `PTTL`), if held.
    pub async fn ttl(name: &str) -> Option<Duration> {
        let mut conn = RedisServer::shared().connection().await;
        let pttl: i64 = redis::cmd("PTTL")
            .arg(name)
            .query_async(&mut conn)
            .await
            .unwrap();
        u64::try_from(pttl).ok().map(Duration::from_millis)
    }

    /// How many waiters stand in the fair queue of backend key `name`.
    pub async fn queued(name: &str) -> usize {
        let mut conn = RedisServer::shared().connection().await;
        let len: usize = redis::cmd("LLEN")
            .arg(format!("lock-queue:{name}"))
            .query_async(&mut conn)
            .await
            .unwrap();
        len
    }

    /// Another owner takes the key behind the holder's back.
    pub async fn steal(name: &str) {
        let mut conn = RedisServer::shared().connection().await;
        let _: () = redis::cmd("SET")
            .arg(name)
            .arg("thief")
            .arg("PX")
            .arg(Duration::from_secs(10).as_millis() as u64)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}
