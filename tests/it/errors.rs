//! Bad input gets a clear error that names the cause (and the key), never a panic or a hang,
//! and writes nothing to the backend.

use std::time::Duration;

use distlock::{LockClient, LockError};
use support::RedisServer;

async fn config_error(url: &str) -> String {
    match LockClient::connect(url).await {
        Err(err @ LockError::Config(_)) => err.to_string(),
        other => panic!("expected a Config error for {url:?}, got {other:?}"),
    }
}

#[tokio::test]
async fn invalid_urls_and_schemes_are_config_errors_that_say_what_is_supported() {
    let message = config_error("127.0.0.1:6379").await;
    assert!(
        message.contains("not a lock backend URL") && message.contains("redis://"),
        "{message}"
    );
    let message = config_error("mongodb://db:27017").await;
    assert!(
        message.contains("unknown lock backend scheme `mongodb://`"),
        "{message}"
    );
    assert!(
        message.contains("memory://") && message.contains("redis://"),
        "{message}"
    );
    if !cfg!(feature = "etcd") {
        let message = config_error("etcd://127.0.0.1:2379").await;
        assert!(message.contains("`etcd` feature"), "{message}");
    } else {
        let message = config_error("etcd://user@127.0.0.1:2379").await;
        assert!(message.contains("needs a user and a password"), "{message}");
    }
    let message = config_error("redis://127.0.0.1:notaport").await;
    assert!(message.contains("invalid Redis URL"), "{message}");
    let message = config_error("redis://:topsecret@127.0.0.1:notaport").await;
    assert!(!message.contains("topsecret"), "password leaked: {message}");
    // A backend whose feature is off: lock-runtime/tests/features.rs (run without features).
    // The SQL options are checked before anything connects.
    for (url, expected) in [
        (
            "postgres://127.0.0.1/db?pool_size=0",
            "pool size must be 1 to 64",
        ),
        (
            "mysql://127.0.0.1/db?table=no-dashes",
            "invalid lock table name",
        ),
        (
            "postgres://127.0.0.1/db?create_table=sometimes",
            "`true` or `false`",
        ),
    ] {
        let message = config_error(url).await;
        assert!(message.contains(expected), "{url}: {message}");
    }
}

#[tokio::test]
async fn unusable_settings_are_rejected_when_the_client_is_built() {
    let err = LockClient::builder("memory://")
        .default_lease(Duration::from_millis(1))
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("too short"), "{err}");
    let err = LockClient::builder("memory://")
        .prefix("x:")
        .fencing_prefix("x:fence:")
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("overlap"), "{err}");
    let err = LockClient::builder("memory://")
        .response_timeout(Duration::ZERO)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Config(_)), "{err}");
}

async fn bad_keys_and_leases_are_refused(client: &LockClient) {
    let err = client.lock("").acquire().await.unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidKey { reason, .. } if reason.contains("empty")),
        "{err}"
    );

    let long = format!("order:{}", "9".repeat(5_000));
    let err = client.lock(long.as_str()).acquire().await.unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, LockError::InvalidKey { .. }), "{message}");
    assert!(
        message.contains("order:999") && message.contains("5006 bytes"),
        "{message}"
    );
    assert!(message.len() < 500, "the key is shortened in the message");

    let err = client.lock("a\u{0}b").acquire().await.unwrap_err();
    assert!(err.to_string().contains("control character"), "{err}");

    let err = client
        .lock("order:1")
        .lease(Duration::from_millis(5))
        .acquire()
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("`order:1`") && message.contains("too short"),
        "{message}"
    );
}

#[tokio::test]
async fn bad_keys_and_leases_are_refused_by_memory() {
    let url = format!("memory://{}", support::unique("errors"));
    let client = LockClient::connect(&url).await.unwrap();
    bad_keys_and_leases_are_refused(&client).await;
    assert!(distlock::__private::testing::memory_peek(&url, "lock:order:1").is_none());
}

#[tokio::test]
async fn bad_keys_and_leases_are_refused_by_redis_and_nothing_is_written() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    bad_keys_and_leases_are_refused(&client).await;
    let mut conn = server.connection().await;
    let keys: i64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
    assert_eq!(keys, 0);
}

/// Every malformed URL fails fast — no connection attempt that hangs — with an error that names
/// what is wrong; none panics.
#[tokio::test]
async fn malformed_urls_fail_fast_and_say_what_is_wrong() {
    let cases: &[(&str, &str)] = &[
        ("", "not a lock backend URL"),
        ("   ", "not a lock backend URL"),
        ("\u{0}\u{1}garbage\u{7f}", "not a lock backend URL"),
        ("://", "unknown lock backend scheme"),
        ("redis:/127.0.0.1:6379", "not a lock backend URL"),
        ("ftp://127.0.0.1", "unknown lock backend scheme `ftp://`"),
        ("REDIS://127.0.0.1:6379", "unknown lock backend scheme"),
        ("redis://", "invalid Redis URL"),
        ("redis://:6379", "invalid Redis URL"),
        ("redis://127.0.0.1:99999", "invalid Redis URL"),
        ("redis://127.0.0.1:-1", "invalid Redis URL"),
        ("redis://127.0.0.1:6379/notadb", "invalid Redis URL"),
        ("redlock://", "names no nodes"),
        ("redlock://127.0.0.1:1,127.0.0.1:2", "at least 3"),
        ("redlock://127.0.0.1:1,,127.0.0.1:3", "empty"),
        ("redlock://127.0.0.1:1,127.0.0.1:1,127.0.0.1:2", "twice"),
        ("redis+cluster://", "no nodes"),
    ];
    for (url, says) in cases {
        let started = std::time::Instant::now();
        let result = tokio::time::timeout(Duration::from_secs(5), LockClient::connect(url))
            .await
            .unwrap_or_else(|_| panic!("{url:?} hung"));
        let err = result.expect_err(url);
        let message = err.to_string();
        assert!(
            matches!(err, LockError::Config(_)),
            "{url:?}: expected Config, got {message}"
        );
        assert!(message.contains(says), "{url:?}: {message}");
        assert!(started.elapsed() < Duration::from_secs(1), "{url:?}");
    }
}

/// A port where nothing listens, and TLS spoken to a plain-text server, fail within the connect
/// timeout with a `Connect` error naming the server.
#[tokio::test]
async fn unreachable_or_wrong_protocol_servers_fail_within_the_connect_timeout() {
    let dead = format!("redis://127.0.0.1:{}", support::free_port());
    let started = std::time::Instant::now();
    let err = LockClient::builder(dead.as_str())
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Connect { .. }), "{err}");
    assert!(err.to_string().contains(&dead), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2));

    if cfg!(feature = "tls") {
        let server = RedisServer::shared();
        let url = format!(
            "rediss://127.0.0.1:{}/?cacert={}",
            server.port(),
            support::certs::Certificates::shared().ca.display()
        );
        let started = std::time::Instant::now();
        let result = tokio::time::timeout(
            Duration::from_secs(10),
            LockClient::builder(url.as_str())
                .connect_timeout(Duration::from_millis(500))
                .build(),
        )
        .await
        .expect("TLS to a plain server must not hang");
        let err = result.unwrap_err();
        assert!(matches!(err, LockError::Connect { .. }), "{err}");
        assert!(err.to_string().contains("127.0.0.1"), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        // The server is unharmed: a plain client still works.
        let client = LockClient::connect(&server.url()).await.unwrap();
        client
            .lock("after-tls")
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
}

/// A fair lock on a backend that cannot queue waiters across processes (Redlock here; also the
/// SQL lock tables) fails at once with `Unsupported`, naming the store, the feature and the key
/// and pointing at the table of what each store can do, before anything is sent.
#[tokio::test]
async fn a_fair_lock_where_the_backend_cannot_queue_is_unsupported() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let url = format!(
        "redlock://{}",
        servers
            .iter()
            .map(|s| s.url().trim_start_matches("redis://").to_owned())
            .collect::<Vec<_>>()
            .join(",")
    );
    let client = LockClient::connect(&url).await.unwrap();
    for server in &servers {
        server.reset_stats().await;
    }
    let err = client
        .lock("order:7")
        .fair()
        .acquire()
        .await
        .expect_err("Redlock has no fair queue");
    let message = err.to_string();
    assert!(
        matches!(
            &err,
            LockError::Unsupported { backend: "redlock", feature: distlock::Feature::Fair, key: Some(key), .. }
                if key == "order:7"
        ),
        "{err:?}"
    );
    assert!(
        message.contains("`order:7`")
            && message.contains("fair")
            && message.contains("distlock::guide::backends"),
        "{message}"
    );
    for server in &servers {
        assert_eq!(server.command_calls("set").await, 0, "nothing sent");
        assert_eq!(server.command_calls("evalsha").await, 0, "nothing sent");
    }
}
