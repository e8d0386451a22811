//! Which client an annotated function uses: `client = …` (a library's own), else the task's
//! (`distlock::with_client`), else the global one — run in `attribute_memory`, whose global
//! client is `memory://attribute-tests`, so each test proves the store it used was not that.

use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockError, distributed_lock, with_client};

const GLOBAL: &str = "memory://attribute-tests";

fn peek(url: &str, name: &str) -> Option<String> {
    distlock::__private::testing::memory_peek(url, name).map(|(token, _)| token)
}

/// A library's type owning its client: its annotated methods never touch the application's.
struct Repository {
    locks: LockClient,
    url: &'static str,
}

impl Repository {
    #[distributed_lock(key = "repo:<id>", lease = "5s", client = self.locks)]
    async fn save(&self, id: u64) -> Result<(Option<String>, Option<String>), LockError> {
        // While the body runs: the lock is in the repository's store, not the global one.
        Ok((
            peek(self.url, &format!("lock:repo:{id}")),
            peek(GLOBAL, &format!("lock:repo:{id}")),
        ))
    }

    /// A reference works as well as the value, and so does a function giving one.
    #[distributed_lock(key = "repo:<id>", client = &self.locks)]
    async fn by_reference(&self, id: u64) -> Result<bool, LockError> {
        Ok(peek(self.url, &format!("lock:repo:{id}")).is_some())
    }

    fn shared(&self) -> Arc<LockClient> {
        Arc::new(self.locks.clone())
    }

    #[distributed_lock(key = ["repo:<a>", "repo:<b>"], client = self.shared())]
    async fn both(&self, a: u64, b: u64) -> Result<usize, LockError> {
        Ok([a, b]
            .iter()
            .filter(|id| peek(self.url, &format!("lock:repo:{id}")).is_some())
            .count())
    }
}

#[tokio::test]
async fn client_names_the_store_whatever_the_global_one_is() {
    super::backend::setup().await;
    let repo = Repository {
        locks: LockClient::connect("memory://a-library").await.unwrap(),
        url: "memory://a-library",
    };
    let (own, global) = repo.save(7).await.unwrap();
    assert!(own.is_some(), "the lock was not in the repository's store");
    assert_eq!(global, None, "the lock went to the global client");
    assert_eq!(peek("memory://a-library", "lock:repo:7"), None, "released");
    assert!(repo.by_reference(8).await.unwrap());
    assert_eq!(repo.both(1, 2).await.unwrap(), 2);
    // `with_client` does not override an explicit `client = …`.
    let other = LockClient::connect("memory://not-the-library")
        .await
        .unwrap();
    let (own, _) = with_client(&other, repo.save(9)).await.unwrap();
    assert!(own.is_some());
}

#[distributed_lock(key = "job:<name>", lease = "5s")]
async fn job(name: &str, store: &str) -> Result<(Option<String>, Option<String>), LockError> {
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok((
        peek(store, &format!("lock:job:{name}")),
        peek(GLOBAL, &format!("lock:job:{name}")),
    ))
}

/// Two tests, each with a backend of its own through `with_client`, running at once (the
/// harness runs tests in parallel): the same key in each is held at the same time, each in its
/// own store, none in the global one.
async fn in_a_store_of_its_own(store: &'static str) {
    super::backend::setup().await;
    let client = LockClient::connect(store).await.unwrap();
    for _ in 0..5 {
        let (own, global) = with_client(&client, job("shared-name", store))
            .await
            .unwrap();
        assert!(own.is_some(), "{store}: not in the task's store");
        assert_eq!(global, None, "{store}: in the global store");
    }
    // Outside `with_client`, the global client again (a name of this test's own: the other
    // test looks for "shared-name" in the global store meanwhile).
    let (_, global) = job(store, store).await.unwrap();
    assert!(
        global.is_some(),
        "outside with_client the global client is used"
    );
}

#[tokio::test]
async fn with_client_gives_a_test_its_own_store_a() {
    in_a_store_of_its_own("memory://test-store-a").await;
}

#[tokio::test]
async fn with_client_gives_a_test_its_own_store_b() {
    in_a_store_of_its_own("memory://test-store-b").await;
}

/// Durations from code: a `const`, a function's result, an expression — checked when the call
/// is made.
const LEASE: Duration = Duration::from_millis(1_500);

fn no_wait() -> Duration {
    Duration::ZERO
}

#[distributed_lock(key = "code:<n>", lease = LEASE, wait = no_wait(), min_hold = Duration::from_secs(1))]
async fn from_code(n: u32, store: &str) -> Result<Option<Duration>, LockError> {
    Ok(
        distlock::__private::testing::memory_peek(store, &format!("lock:code:{n}"))
            .map(|(_, ttl)| ttl),
    )
}

#[distributed_lock(key = "code:<n>", lease = Duration::from_millis(n as u64))]
async fn lease_of(n: u32) -> Result<(), LockError> {
    Ok(())
}

#[tokio::test]
async fn durations_come_from_code_and_are_checked_at_the_call() {
    super::backend::setup().await;
    let store = "memory://durations-from-code";
    let client = LockClient::connect(store).await.unwrap();
    // The lease: the stored TTL is at most LEASE, and more than the default would leave.
    let ttl = with_client(&client, from_code(1, store))
        .await
        .unwrap()
        .expect("held while the body runs");
    assert!(
        ttl <= LEASE && ttl > Duration::from_millis(1_000),
        "{ttl:?}"
    );
    // min_hold: kept after the body returned, gone once it has passed.
    assert!(
        peek(store, "lock:code:1").is_some(),
        "released before min_hold"
    );
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    assert_eq!(peek(store, "lock:code:1"), None);
    // wait = no_wait(): a busy lock fails at once (the client's default would wait 10 s).
    let other = LockClient::connect(store).await.unwrap();
    let held = other.lock("code:2").acquire().await.unwrap();
    let started = std::time::Instant::now();
    let busy = with_client(&client, from_code(2, store)).await;
    assert!(matches!(busy, Err(LockError::Busy { .. })), "{busy:?}");
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    held.release().await.unwrap();
    // A value out of range is a Config error at the call, naming the function and the key,
    // and nothing is written.
    let error = with_client(&client, lease_of(1)).await.unwrap_err();
    assert!(matches!(error, LockError::Config(_)), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("`lease_of`")
            && message.contains("code:1")
            && message.contains("too short"),
        "{message}"
    );
    assert_eq!(
        distlock::__private::testing::memory_peek(store, "lock:code:1"),
        None
    );
    with_client(&client, lease_of(2_000)).await.unwrap();
}
