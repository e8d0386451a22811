//! `#[distributed_lock]` against `memory://`: one global client for every test of this binary,
//! each test on its own runtime.

#[path = "attribute/cases.rs"]
mod cases;

#[path = "attribute/clients.rs"]
mod clients;

mod backend {
    use std::time::Duration;

    const URL: &str = "memory://attribute-tests";

    pub async fn setup() {
        static INIT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
        INIT.get_or_init(|| async {
            let client = distlock::LockClient::connect(URL).await.unwrap();
            distlock::init(client).expect("first init");
        })
        .await;
    }

    pub async fn holder(name: &str) -> Option<String> {
        distlock::__private::testing::memory_peek(URL, name).map(|(token, _)| token)
    }

    /// How long the store keeps backend key `name` (its TTL), if held.
    pub async fn ttl(name: &str) -> Option<Duration> {
        distlock::__private::testing::memory_peek(URL, name).map(|(_, ttl)| ttl)
    }

    pub async fn queued(name: &str) -> usize {
        distlock::__private::testing::memory_queued(URL, name)
    }

    pub async fn steal(name: &str) {
        distlock::__private::testing::memory_force(
            URL,
            name,
            Some(("thief", Duration::from_secs(10))),
        );
    }
}
