//! A backend whose feature is off is a `LockError::Config` that names the feature to turn on
//! (and never echoes the URL's password), not "unsupported scheme"; with the feature on, the
//! same URL reaches the backend (here: an error connecting, nothing listens on port 1).
//!
//! `./scripts/test.sh` runs this twice: with every feature, and with none (`cargo test -p
//! lock-runtime --no-default-features --test features`). It also passes with lock-runtime's
//! default (`redis` without `tls`: `rediss://` must name `tls`), which the script leaves to the
//! unit test of that message (`client::builder`'s `tls_built`): a build of its own cost 51 s of
//! a fresh clone's run.

use std::time::Duration;

use distlock_runtime::{LockClient, LockError};

/// Connects to `url` (nothing listens on its port) and checks what comes back: with `enabled`,
/// an error of the backend's connecting (`Connect`, for every backend); without, a config error
/// that says `expected`.
async fn check(url: &str, feature: &str, enabled: bool, expected: &str) {
    let result = LockClient::builder(url)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await;
    match (enabled, result) {
        (true, Err(LockError::Connect { .. })) => {}
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

/// A CA certificate (no key anywhere: it signs nothing), for URLs that must name one.
const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBnjCCAUWgAwIBAgIUXd5c3x9b0oSEqZz20sbozJI1JpkwCgYIKoZIzj0EAwIw\nJDEiMCAGA1UEAwwZZGlzdGxvY2sgZmVhdHVyZXMgdGVzdCBDQTAgFw0yNjExMjYy\nMDE0NTdaGA8yMTI2MTEwMjIwMTQ1N1owJDEiMCAGA1UEAwwZZGlzdGxvY2sgZmVh\ndHVyZXMgdGVzdCBDQTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABAFq2gGNjVF1\nh7qGyy8sPwNJdmfI2gFd4xomoVqY3EP36nIZvojzPM/EXk9ITpKs/pQnlLm+JRQW\nApTrAug/5bajUzBRMB0GA1UdDgQWBBTIbQa74VnNWbVhFUQkCi7LDkOPoDAfBgNV\nHSMEGDAWgBTIbQa74VnNWbVhFUQkCi7LDkOPoDAPBgNVHRMBAf8EBTADAQH/MAoG\nCCqGSM49BAMCA0cAMEQCIDSyQ3mucQcdOMc1lKywbnRnZskTsCqekgJaEzQS3Dkw\nAiBCHplJWn4kcuipREWgSA6XHtQtnvjucf94xzGUfiqhkw==\n-----END CERTIFICATE-----\n";

/// The TLS form of each store's URL: without `tls` (its backend on), it names `tls`; without
/// its backend, it names the backend.
#[tokio::test]
async fn tls_forms() {
    let ca = std::env::temp_dir().join(format!("distlock-features-ca-{}.pem", std::process::id()));
    std::fs::write(&ca, CA).unwrap();
    let zks = format!("zks://u:topsecret@127.0.0.1:1?cacert={}", ca.display());
    for (url, backend, on) in [
        (
            "etcds://u:topsecret@127.0.0.1:1",
            "etcd",
            cfg!(feature = "etcd"),
        ),
        (zks.as_str(), "zookeeper", cfg!(feature = "zookeeper")),
        (
            "postgres://u:topsecret@127.0.0.1:1/db?sslmode=require",
            "postgres",
            cfg!(feature = "postgres"),
        ),
        (
            "mysql://u:topsecret@127.0.0.1:1/db?ssl-mode=REQUIRED",
            "mysql",
            cfg!(feature = "mysql"),
        ),
    ] {
        let expected = if on {
            "`tls` feature"
        } else {
            &format!("`{backend}` feature")
        };
        check(url, "tls", on && cfg!(feature = "tls"), expected).await;
    }
    let _ = std::fs::remove_file(&ca);
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

#[tokio::test]
async fn nats() {
    check(
        "nats://u:topsecret@127.0.0.1:1",
        "nats",
        cfg!(feature = "nats"),
        "`nats` feature",
    )
    .await;
}
