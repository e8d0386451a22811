//! The global client: `client()` before `init`, `init` twice, `init_from_env`, and one client
//! used from several tokio runtimes in turn, each gone before the next starts — what
//! `#[tokio::test]` functions do. One test, because the global client is per process.

use std::time::Duration;

use distlock::{LockClient, LockError};
use support::RedisServer;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn the_global_client_is_set_once_and_outlives_the_runtime_that_made_it() {
    let server = RedisServer::start();

    let err = distlock::client().unwrap_err();
    assert!(matches!(err, LockError::NotInitialized));
    assert!(err.to_string().contains("distlock::init"), "{err}");

    // SAFETY: this binary has a single test, so no other thread reads the environment now.
    unsafe { std::env::set_var(distlock::LockClient::URL_ENV, "nope://x") };
    let err = runtime().block_on(distlock::init_from_env()).unwrap_err();
    assert!(
        err.to_string().contains("unknown lock backend scheme"),
        "{err}"
    );
    assert!(matches!(distlock::client(), Err(LockError::NotInitialized)));

    // Runtime A connects and installs the client, then goes away.
    unsafe { std::env::set_var(distlock::LockClient::URL_ENV, server.url()) };
    runtime().block_on(async {
        distlock::init_from_env().await.unwrap();
        let guard = distlock::client()
            .unwrap()
            .lock("g")
            .acquire()
            .await
            .unwrap();
        guard.release().await.unwrap();
    });

    let err = runtime()
        .block_on(async { distlock::init(LockClient::connect("memory://").await.unwrap()) })
        .unwrap_err();
    assert!(matches!(err, LockError::AlreadyInitialized), "{err}");
    assert_eq!(
        distlock::client().unwrap().backend_kind(),
        "redis",
        "first client kept"
    );

    // Runtimes B, C, D each use it after A is gone: commands, waiting (pub/sub), renewal.
    for round in 0..3 {
        let rt = if round == 1 {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap()
        } else {
            runtime()
        };
        rt.block_on(async {
            let client = distlock::client().unwrap();
            let held = client
                .lock("g")
                .lease(Duration::from_millis(300))
                .acquire()
                .await
                .unwrap();
            let waiter = tokio::spawn(async move {
                let started = std::time::Instant::now();
                let guard = client
                    .lock("g")
                    .wait(Duration::from_secs(5))
                    .acquire()
                    .await
                    .unwrap();
                let waited = started.elapsed();
                guard.release().await.unwrap();
                waited
            });
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert!(
                !held.is_lost(),
                "round {round}: renewal works on this runtime"
            );
            held.release().await.unwrap();
            let waited = waiter.await.unwrap();
            assert!(
                waited < Duration::from_millis(900),
                "round {round}: woken by the release, not the TTL: {waited:?}"
            );
        });
        drop(rt);
    }

    // A guard still held when its runtime shuts down is released anyway.
    let rt = runtime();
    rt.block_on(async {
        let guard = distlock::client()
            .unwrap()
            .lock("g")
            .lease(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap();
        tokio::spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        tokio::task::yield_now().await;
        assert!(server.get("lock:g").await.is_some());
    });
    drop(rt);
    runtime().block_on(async {
        assert!(
            support::eventually(Duration::from_secs(2), || async {
                server.get("lock:g").await.is_none()
            })
            .await,
            "released after its runtime shut down, long before the 30 s lease"
        );
    });
}
