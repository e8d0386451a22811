//! The NATS backend's own cases (the conformance suite has the rest): authentication as the
//! server asks for it, a bucket whose settings would break locks, a server without JetStream.

use std::time::Duration;

use distlock::{LockClient, LockError};
use support::async_nats;
use support::nats::NatsServer;
use support::unique;

fn bucket() -> String {
    unique("nats").replace(['.', ':'], "-")
}

/// The connect error's reason, or a panic naming what came instead.
async fn refused(url: &str) -> String {
    match LockClient::connect(url).await {
        Err(LockError::Connect { reason, .. }) => reason,
        Err(other) => panic!("{url}: expected a Connect error, got {other}"),
        Ok(_) => panic!("{url}: connected"),
    }
}

/// User and password, or a token, in the URL are what the server checks (async-nats itself
/// reads neither from a URL: the backend passes them as options); a wrong one fails at connect
/// saying so, without the password.
#[tokio::test]
async fn credentials_in_the_url_are_the_ones_the_server_checks() {
    let server = NatsServer::start_with(&["--user", "app", "--pass", "s3cret"]);
    let url = |userinfo: &str| {
        format!(
            "nats://{userinfo}127.0.0.1:{}?bucket={}",
            server.port,
            bucket()
        )
    };
    let client = LockClient::connect(&url("app:s3cret@")).await.unwrap();
    let guard = client.lock("job").acquire().await.unwrap();
    guard.release().await.unwrap();
    for wrong in ["app:nope@", ""] {
        let reason = refused(&url(wrong)).await;
        assert!(reason.contains("refused the credentials"), "{reason}");
        assert!(
            !reason.contains("nope") && !reason.contains("s3cret"),
            "{reason}"
        );
    }
    let server = NatsServer::start_with(&["--auth", "t0ken"]);
    let url = format!("nats://t0ken@127.0.0.1:{}?bucket={}", server.port, bucket());
    let client = LockClient::connect(&url).await.unwrap();
    client
        .lock("job")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// An NKey seed (`?nkey=<seed>`) signs the connection as the user the server knows by its
/// public key; another seed is refused, and never appears in the error.
#[tokio::test]
async fn an_nkey_seed_in_the_url_signs_the_connection() {
    let user = support::nkeys::KeyPair::new_user();
    let seed = user.seed().unwrap();
    let dir = std::env::temp_dir().join(unique("distlock-nkey"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("server.conf");
    std::fs::write(
        &config,
        format!(
            "authorization {{ users = [ {{ nkey: {} }} ] }}\n",
            user.public_key()
        ),
    )
    .unwrap();
    let server = NatsServer::start_with(&["-c", config.to_str().unwrap()]);
    let url = format!(
        "nats://127.0.0.1:{}?bucket={}&nkey={seed}",
        server.port,
        bucket()
    );
    let client = LockClient::connect(&url).await.unwrap();
    client
        .lock("job")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let other = support::nkeys::KeyPair::new_user().seed().unwrap();
    let reason = refused(&url.replace(&seed, &other)).await;
    assert!(reason.contains("refused the credentials"), "{reason}");
    assert!(!reason.contains(&other), "{reason}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A bucket made without what locks need — per-key TTLs with markers, one revision per key,
/// the republish that wakes waiters — is refused at connect, naming what it lacks; distlock's
/// own is made with all three.
#[tokio::test]
async fn a_bucket_without_what_locks_need_is_refused_naming_it() {
    let server = NatsServer::start();
    let plain = bucket();
    let js = async_nats::jetstream::new(
        async_nats::connect(format!("127.0.0.1:{}", server.port))
            .await
            .unwrap(),
    );
    js.create_key_value(async_nats::jetstream::kv::Config {
        bucket: plain.clone(),
        history: 5,
        ..Default::default()
    })
    .await
    .unwrap();
    let reason = refused(&format!("nats://127.0.0.1:{}?bucket={plain}", server.port)).await;
    for lacks in [
        "per-key TTLs",
        "one revision per key",
        "republish",
        "`?bucket=`",
    ] {
        assert!(reason.contains(lacks), "{lacks}: {reason}");
    }
    let made = bucket();
    LockClient::connect(&format!("nats://127.0.0.1:{}?bucket={made}", server.port))
        .await
        .unwrap();
    let config = js
        .get_stream(format!("KV_{made}"))
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .config
        .clone();
    assert!(config.allow_message_ttl && config.subject_delete_marker_ttl.is_some());
    assert_eq!(config.max_messages_per_subject, 1);
    assert!(config.republish.is_some());
}

/// A server without JetStream (`-js` left out) fails at connect, saying to turn it on; so does
/// a port nothing listens on, within the connect timeout.
#[tokio::test]
async fn a_server_without_jetstream_or_nothing_listening_fails_at_connect() {
    let server = NatsServer::start_without_jetstream();
    let reason = refused(&format!("nats://127.0.0.1:{}", server.port)).await;
    assert!(reason.contains("-js"), "{reason}");
    let port = support::free_port();
    let started = std::time::Instant::now();
    let reason = match LockClient::builder(format!("nats://127.0.0.1:{port}"))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
    {
        Err(LockError::Connect { reason, .. }) => reason,
        other => panic!("expected a Connect error, got {other:?}"),
    };
    assert!(
        reason.contains("refused") || reason.contains("connect timeout"),
        "{reason}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
