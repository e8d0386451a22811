//! Bad input gets a clear error that names the cause (and the key), never a panic or a hang,
//! and writes nothing to the backend.

mod support;

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
    let message = config_error("etcd://127.0.0.1:2379").await;
    assert!(message.contains("not available"), "{message}");
    let message = config_error("redis://127.0.0.1:notaport").await;
    assert!(message.contains("invalid Redis URL"), "{message}");
    let message = config_error("redis://:topsecret@127.0.0.1:notaport").await;
    assert!(!message.contains("topsecret"), "password leaked: {message}");
    if !cfg!(feature = "tls") {
        let message = config_error("rediss://127.0.0.1:6380").await;
        assert!(message.contains("`tls` feature"), "{message}");
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
