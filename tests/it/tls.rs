//! `rediss://`: Redis over TLS (the `tls` feature), against a real TLS-only `redis-server`.
#![cfg(feature = "tls")]

use std::time::Duration;

use distlock::{LockClient, LockError};
use support::RedisServer;

#[tokio::test]
async fn locks_work_over_tls() {
    let server = RedisServer::start_tls();
    let client = LockClient::connect(&server.url()).await.unwrap();
    assert_eq!(client.backend_kind(), "redis");
    let guard = client
        .lock("tls")
        .lease(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let token = server
        .get("lock:tls")
        .await
        .expect("the lock is on the server");
    let holder = distlock::Holder::from_token(&token).expect("a distlock owner token");
    assert_eq!(holder.pid, std::process::id(), "{token}");
    // Waiting (the pub/sub connection) and renewal go over TLS too.
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .lock("tls")
                .wait(Duration::from_secs(5))
                .acquire()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(1), waiter)
        .await
        .expect("woken by the release")
        .unwrap()
        .unwrap();
    second.release().await.unwrap();
    assert_eq!(server.get("lock:tls").await, None);
}

#[tokio::test]
async fn an_untrusted_certificate_is_refused_with_a_connect_error() {
    let server = RedisServer::start_tls();
    let url = server.url().replace("/#insecure", "");
    let err = LockClient::builder(url)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Connect { .. }), "{err}");
    let message = err.to_string();

    assert!(
        message.contains("TLS certificate verification failed"),
        "{message}"
    );
}

#[tokio::test]
async fn plain_redis_cannot_talk_to_a_tls_port() {
    let server = RedisServer::start_tls();
    let url = format!("redis://127.0.0.1:{}", server.port());
    let err = LockClient::builder(url)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Connect { .. }), "{err}");
}
