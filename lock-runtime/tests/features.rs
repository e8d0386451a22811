//! A backend whose feature is off is a `LockError::Config` that names the feature to turn on
//! (and never echoes the URL's password), not "unsupported scheme".
//!
//! `./scripts/test.sh` runs this three times: with every feature (nothing to check), with the
//! default features (`redis` without `tls`: `rediss://` must name `tls`), and with none
//! (`cargo test -p lock-runtime --no-default-features --test features`), where every line below
//! is checked.

use lock_runtime::{LockClient, LockError};

/// (URL, the feature it needs, whether this build has it, what the error must say).
const CASES: &[(&str, &str, bool, &str)] = &[
    (
        "redis://:topsecret@127.0.0.1:1",
        "redis",
        cfg!(feature = "redis"),
        "`redis` feature",
    ),
    (
        "rediss://:topsecret@127.0.0.1:1",
        "tls",
        cfg!(feature = "tls"),
        // Without `redis` as well, the missing feature is `redis`.
        if cfg!(feature = "redis") {
            "`tls` feature"
        } else {
            "`redis` feature"
        },
    ),
    (
        "postgres://u:topsecret@127.0.0.1:1/db",
        "postgres",
        cfg!(feature = "postgres"),
        "`postgres` feature",
    ),
    (
        "mysql://u:topsecret@127.0.0.1:1/db",
        "mysql",
        cfg!(feature = "mysql"),
        "`mysql` feature",
    ),
    (
        "zk://127.0.0.1:1/locks",
        "zookeeper",
        cfg!(feature = "zookeeper"),
        "`zookeeper` feature",
    ),
    (
        "etcd://127.0.0.1:1",
        "etcd",
        cfg!(feature = "etcd"),
        "`etcd` feature",
    ),
];

#[tokio::test]
async fn a_backend_whose_feature_is_off_names_the_feature() {
    let mut checked = 0;
    for &(url, feature, enabled, expected) in CASES {
        if enabled {
            continue;
        }
        checked += 1;
        match LockClient::connect(url).await {
            Err(err @ LockError::Config(_)) => {
                let message = err.to_string();
                assert!(
                    message.contains(expected),
                    "{url} without `{feature}`: {message}"
                );
                assert!(!message.contains("topsecret"), "password leaked: {message}");
            }
            Err(other) => {
                panic!("{url} without `{feature}`: expected a Config error, got {other:?}")
            }
            Ok(_) => panic!("{url} without `{feature}`: connected"),
        }
    }
    // The run without features must check every line (a build that turned a feature on by
    // accident would check fewer).
    if !cfg!(any(
        feature = "redis",
        feature = "tls",
        feature = "postgres",
        feature = "mysql",
        feature = "zookeeper",
        feature = "etcd"
    )) {
        assert_eq!(checked, CASES.len());
    }
}
