//! One backend under test, with the means to look at and tamper with what it holds — what a
//! human would do with `redis-cli` — so the conformance suite can assert on server state.

use std::time::Duration;

use distlock::{LockClient, LockClientBuilder};

use super::{RedisServer, unique};

/// A backend the conformance suite runs against.
#[allow(async_fn_in_trait)]
pub trait Fixture {
    /// The URL clients connect to.
    fn url(&self) -> String;

    /// A builder for a client of this backend (tests adjust leases, fencing, …).
    fn builder(&self) -> LockClientBuilder {
        LockClient::builder(self.url())
    }

    /// A client with default settings.
    async fn client(&self) -> LockClient {
        self.builder().build().await.expect("client connects")
    }

    /// The owner token stored under backend key `name` (prefix included), if any.
    async fn holder(&self, name: &str) -> Option<String>;

    /// The remaining TTL of backend key `name`.
    async fn ttl(&self, name: &str) -> Option<Duration>;

    /// Deletes backend key `name` behind its holder's back.
    async fn delete(&self, name: &str);

    /// Replaces backend key `name` with another owner's token.
    async fn overwrite(&self, name: &str, token: &str, ttl: Duration);
}

/// `memory://<unique name>`: a store of this test's own.
pub struct MemoryFixture {
    url: String,
}

impl MemoryFixture {
    pub fn new() -> MemoryFixture {
        MemoryFixture {
            url: format!("memory://{}", unique("conformance")),
        }
    }
}

impl Fixture for MemoryFixture {
    fn url(&self) -> String {
        self.url.clone()
    }

    async fn holder(&self, name: &str) -> Option<String> {
        distlock::__private::testing::memory_peek(&self.url, name).map(|(token, _)| token)
    }

    async fn ttl(&self, name: &str) -> Option<Duration> {
        distlock::__private::testing::memory_peek(&self.url, name).map(|(_, ttl)| ttl)
    }

    async fn delete(&self, name: &str) {
        distlock::__private::testing::memory_force(&self.url, name, None);
    }

    async fn overwrite(&self, name: &str, token: &str, ttl: Duration) {
        distlock::__private::testing::memory_force(&self.url, name, Some((token, ttl)));
    }
}

/// A `redis-server` of this test's own.
pub struct RedisFixture {
    pub server: RedisServer,
}

impl RedisFixture {
    pub fn new() -> RedisFixture {
        RedisFixture {
            server: RedisServer::start(),
        }
    }
}

impl Fixture for RedisFixture {
    fn url(&self) -> String {
        self.server.url()
    }

    async fn holder(&self, name: &str) -> Option<String> {
        self.server.get(name).await
    }

    async fn ttl(&self, name: &str) -> Option<Duration> {
        let mut conn = self.server.connection().await;
        let pttl: i64 = redis::cmd("PTTL")
            .arg(name)
            .query_async(&mut conn)
            .await
            .expect("PTTL");
        (pttl >= 0).then(|| Duration::from_millis(pttl as u64))
    }

    async fn delete(&self, name: &str) {
        let mut conn = self.server.connection().await;
        let _: i64 = redis::cmd("DEL")
            .arg(name)
            .query_async(&mut conn)
            .await
            .expect("DEL");
    }

    async fn overwrite(&self, name: &str, token: &str, ttl: Duration) {
        let mut conn = self.server.connection().await;
        let _: () = redis::cmd("SET")
            .arg(name)
            .arg(token)
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query_async(&mut conn)
            .await
            .expect("SET");
    }
}
