//! `#[distributed_lock(share = …)]`: the attribute's form of `LockRequest::share`, on
//! `memory://` (the stores' own behaviour is the conformance suite's).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock::{LockClient, LockError, distributed_lock, with_client};

static RUNS: AtomicUsize = AtomicUsize::new(0);

#[distributed_lock(key = "rate:<currency>", share = "30s")]
async fn rate(currency: &str) -> Result<u64, LockError> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(currency.len() as u64 * 100)
}

const SHARE: Duration = Duration::from_secs(30);
static PAIR_RUNS: AtomicUsize = AtomicUsize::new(0);

/// Several keys, and `share` from code: stored under the first key.
#[distributed_lock(key = ["pair:<a>", "pair:<b>"], share = SHARE)]
async fn pair(a: u32, b: u32) -> Result<(u32, u32), LockError> {
    PAIR_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok((a, b))
}

static FAILING_RUNS: AtomicUsize = AtomicUsize::new(0);

#[distributed_lock(key = "failing", share = "30s")]
async fn failing() -> Result<u64, LockError> {
    FAILING_RUNS.fetch_add(1, Ordering::SeqCst);
    Err(LockError::Config("the body failed".into()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_computes_once_for_concurrent_and_later_callers() {
    let client = LockClient::connect("memory://share-attribute")
        .await
        .unwrap();
    with_client(&client, async {
        let calls = (0..4).map(|_| rate("EUR"));
        let answers = futures_util::future::join_all(calls).await;
        for answer in answers {
            assert_eq!(answer.unwrap(), 300);
        }
        assert_eq!(rate("EUR").await.unwrap(), 300, "a later call");
        assert_eq!(
            RUNS.load(Ordering::SeqCst),
            1,
            "the body ran more than once"
        );
        assert_eq!(rate("USDT").await.unwrap(), 400, "another key computes");
        assert_eq!(RUNS.load(Ordering::SeqCst), 2);

        assert_eq!(pair(1, 2).await.unwrap(), (1, 2));
        assert_eq!(pair(1, 2).await.unwrap(), (1, 2));
        assert_eq!(PAIR_RUNS.load(Ordering::SeqCst), 1);
        assert!(
            client.forget_shared("pair:1").await.unwrap(),
            "stored under the first key"
        );

        for _ in 0..2 {
            let error = failing().await.unwrap_err();
            assert!(error.to_string().contains("the body failed"), "{error}");
        }
        assert_eq!(
            FAILING_RUNS.load(Ordering::SeqCst),
            2,
            "an error was shared"
        );
        assert!(
            !client.forget_shared("failing").await.unwrap(),
            "an error was stored"
        );
    })
    .await;
}

/// What can go wrong, against a real `redis-server`.
mod faults {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use distlock::{LockClient, LockError};
    use support::RedisServer;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    async fn stored(server: &RedisServer, key: &str) -> Option<Vec<u8>> {
        let mut conn = server.connection().await;
        redis::cmd("GET")
            .arg(format!("lock-share:lock:{key}"))
            .query_async(&mut conn)
            .await
            .unwrap()
    }

    /// The store is gone once the body has run (killed by the body): the caller still gets
    /// its value — storing it and the release fail, each a warning — and in bounded time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_caller_gets_its_value_when_the_store_is_gone_after_the_body() {
        // Every write on disk before its answer: what the server held when killed, it holds
        // after its restart.
        let mut server = RedisServer::start_persistent();
        let client = LockClient::builder(server.url())
            .connect_timeout(ms(300))
            .response_timeout(ms(300))
            .build()
            .await
            .unwrap();
        let started = Instant::now();
        let value = client
            .lock("gone")
            .lease(ms(1_000))
            .share(Duration::from_secs(60))
            .run(|| async {
                server.kill();
                Ok::<_, LockError>(7u64)
            })
            .await;
        assert_eq!(
            value.unwrap(),
            7,
            "the body's value, though nothing could be stored"
        );
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
        // Nothing was stored: after a restart the next call computes (once the dead call's
        // lock has run out its lease).
        server.restart();
        assert_eq!(stored(&server, "gone").await, None);
        let again = LockClient::connect(&server.url()).await.unwrap();
        let value = again
            .lock("gone")
            .wait(Duration::from_secs(10))
            .share(Duration::from_secs(60))
            .run(|| async { Ok::<_, LockError>(8u64) })
            .await
            .unwrap();
        assert_eq!(value, 8);
    }

    /// A holder that dies in the middle of the body stores nothing: the next caller, which
    /// waited for the lock, gets it when the dead holder's lease runs out, and computes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_holder_that_dies_mid_body_leaves_the_next_caller_to_compute() {
        let server = RedisServer::start();
        let helper = support::helper::spawn(
            "share_hang",
            &[
                ("LOCK_URL", server.url()),
                ("LOCK_KEY", "crash".to_owned()),
                ("LEASE_MS", "1000".to_owned()),
            ],
        );
        helper.read("ran", Duration::from_secs(60)).await;
        helper.signal(libc::SIGKILL);
        let client = LockClient::connect(&server.url()).await.unwrap();
        let runs = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let value = client
            .lock("crash")
            .wait(Duration::from_secs(30))
            .share(Duration::from_secs(60))
            .run(|| async {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, LockError>("computed again".to_owned())
            })
            .await
            .unwrap();
        assert_eq!(value, "computed again");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert!(
            stored(&server, "crash").await.is_some(),
            "the new result is stored"
        );
    }

    /// A waiter woken after the value it waited for has expired computes it itself.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiter_that_finds_the_value_expired_computes_it() {
        let server = RedisServer::start();
        // Two clients: a client's own waiter would be handed the lock at the release.
        let first = LockClient::connect(&server.url()).await.unwrap();
        let other = LockClient::connect(&server.url()).await.unwrap();
        let started = Arc::new(tokio::sync::Notify::new());
        let holding = started.clone();
        let holder = tokio::spawn(async move {
            first
                .lock("brief")
                // Held until 400 ms after the grant: the value (1 ms) has expired by then.
                .min_hold(ms(400))
                .share(ms(1))
                .run(|| async move {
                    holding.notify_one();
                    tokio::time::sleep(ms(150)).await;
                    Ok::<_, LockError>("first".to_owned())
                })
                .await
        });
        // The waiter asks once the holder's body runs (it finds nothing, and waits).
        started.notified().await;
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let waiter = other
            .lock("brief")
            .wait(Duration::from_secs(10))
            .share(Duration::from_secs(60))
            .run(|| async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<_, LockError>("second".to_owned())
            })
            .await
            .unwrap();
        assert_eq!(holder.await.unwrap().unwrap(), "first");
        assert_eq!(waiter, "second", "the expired value was used");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}

/// The SQL stores create their shared results' table on first use, with the index on
/// `expires_at` that the sweep of expired rows reads (`distlock::guide::share`). Each
/// test shares one value through `<url>?table=share_ddl`, then reads the catalogue with
/// the store's own driver.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn share_one_value(url: &str) {
    let client = LockClient::connect(&format!("{url}?table=share_ddl"))
        .await
        .unwrap();
    let value = client
        .lock("k")
        .share(Duration::from_secs(60))
        .run(|| async { Ok::<_, LockError>(1u8) })
        .await
        .unwrap();
    assert_eq!(value, 1);
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_creates_the_shared_results_table_with_its_index() {
    let server = support::postgres::PostgresServer::shared();
    share_one_value(&server.url()).await;
    let (sql, connection) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let rows = sql
        .query(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'share_ddl_shared'",
            &[],
        )
        .await
        .unwrap();
    let indexes: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert!(
        indexes.iter().any(|i| i.contains("(expires_at)")),
        "{indexes:?}"
    );
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_creates_the_shared_results_table_with_its_index() {
    use mysql_async::prelude::Queryable;
    let server = support::mysql::MysqlServer::shared();
    share_one_value(&server.url()).await;
    let mut conn = server.conn().await;
    let columns: Vec<String> = conn
        .query(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS \
             WHERE TABLE_NAME = 'share_ddl_shared' AND INDEX_NAME <> 'PRIMARY'",
        )
        .await
        .unwrap();
    assert_eq!(columns, ["expires_at"]);
}
