//! A backend whose feature is off is a `LockError::Config` that names the feature to turn on
//! (and never echoes the URL's password), not "unsupported scheme"; with the feature on, the
//! same URL reaches the backend (here: an error connecting, nothing listens on port 1).
//!
//! `./scripts/test.sh` runs this three times: with every feature, with lock-runtime's default
//! (`redis` without `tls`: `rediss://` must name `tls`), and with none (`cargo test -p
//! lock-runtime --no-default-features --test features`).

use std::time::Duration;

use lock_runtime::{LockClient, LockError};

/// Connects to `url` (nothing listens on its port) and checks what comes back: with `enabled`,
/// an error of the backend's connecting (Redis, PostgreSQL and MariaDB say `Connect`; etcd and
/// ZooKeeper, as of 2026-11-26, `Backend` with op `connect` — issue 49 makes them `Connect`);
/// without, a config error that says `expected`.
async fn check(url: &str, feature: &str, enabled: bool, expected: &str) {
    let result = LockClient::builder(url)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await;
    match (enabled, result) {
        (true, Err(LockError::Connect { .. })) => {}
        (true, Err(LockError::Backend { op: "connect", .. })) => {}
        (false, Err(err @ LockError::Config(_))) => {
            let message = err.to_string();
            assert!(
                message.contains(expected),
                "{url} without `{feature}`: {message}"
            );
            assert!(!message.contains("topsecret"), "password leaked: {message}");
        }
        (enabled, Err(other)) => panic!(
            "{url} with `{feature}` {}: unexpected {other:?}",
            if enabled { "on" } else { "off" }
        ),
        (_, Ok(_)) => panic!("{url}: connected to port 1"),
    }
}

#[tokio::test]
async fn redis() {
    check(
        "redis://:topsecret@127.0.0.1:1",
        "redis",
        cfg!(feature = "redis"),
        "`redis` feature",
    )
    .await;
}

#[tokio::test]
async fn rediss() {
    // Without `redis` as well, the missing feature is `redis`.
    let expected = if cfg!(feature = "redis") {
        "`tls` feature"
    } else {
        "`redis` feature"
    };
    check(
        "rediss://:topsecret@127.0.0.1:1",
        "tls",
        cfg!(feature = "tls"),
        expected,
    )
    .await;
}

#[tokio::test]
async fn postgres() {
    check(
        "postgres://u:topsecret@127.0.0.1:1/db",
        "postgres",
        cfg!(feature = "postgres"),
        "`postgres` feature",
    )
    .await;
}

#[tokio::test]
async fn mysql() {
    check(
        "mysql://u:topsecret@127.0.0.1:1/db",
        "mysql",
        cfg!(feature = "mysql"),
        "`mysql` feature",
    )
    .await;
}

#[tokio::test]
async fn zookeeper() {
    check(
        "zk://127.0.0.1:1/locks",
        "zookeeper",
        cfg!(feature = "zookeeper"),
        "`zookeeper` feature",
    )
    .await;
}

#[tokio::test]
async fn etcd() {
    check(
        "etcd://127.0.0.1:1",
        "etcd",
        cfg!(feature = "etcd"),
        "`etcd` feature",
    )
    .await;
}
