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
            client.forget("pair:1").await.unwrap(),
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
            !client.forget("failing").await.unwrap(),
            "an error was stored"
        );
    })
    .await;
}
