//! TLS and authentication against servers configured as in production: TLS-only ports with
//! certificates from a CA of the test's own (`support::certs`), client certificates, passwords.
//! Each bad input fails at connect with a `LockError::Connect` (or `Config`) that names the
//! server and the cause, never a hang, never the password. The core conformance cases over TLS
//! are in `conformance.rs` (`tls_suite!`).
#![cfg(feature = "tls")]

use std::time::Duration;

use distlock::{LockClient, LockError, TlsConfig};
use support::RedisServer;
use support::certs::Certificates;

/// Connects with a short timeout and returns the error, which must come within the timeout.
pub(crate) async fn refused(url: &str) -> LockError {
    refused_with(LockClient::builder(url)).await
}

pub(crate) async fn refused_with(builder: distlock::LockClientBuilder) -> LockError {
    let started = std::time::Instant::now();
    let error = builder
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect_err("the connection must be refused");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refused only after {:?}: {error}",
        started.elapsed()
    );
    error
}

pub(crate) fn connect_error(error: &LockError, port: u16, says: &str) {
    assert!(matches!(error, LockError::Connect { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains(&format!(":{port}")),
        "names the server: {message}"
    );
    assert!(message.contains(says), "says `{says}`: {message}");
}

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
    // The server's TCP port speaks TLS only: what it holds came over TLS.
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
    assert!(!guard.is_lost(), "renewed over TLS past its 300 ms lease");
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
async fn two_clients_exclude_each_other_over_tls() {
    let server = RedisServer::start_tls();
    let one = LockClient::connect(&server.url()).await.unwrap();
    let two = LockClient::connect(&server.url()).await.unwrap();
    let held = one.lock("x").acquire().await.unwrap();
    match two.lock("x").wait(Duration::ZERO).acquire().await {
        Err(LockError::Busy { .. }) => {}
        other => panic!("a second client over TLS got {other:?}"),
    }
    held.release().await.unwrap();
    two.lock("x")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert_eq!(server.get("lock:x").await, None);
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let certs = Certificates::shared();
    let server = RedisServer::start_tls_with(&["--tls-auth-clients", "yes"]);
    // Without a certificate the server refuses the handshake.
    let error = refused(&server.url()).await;
    connect_error(&error, server.port(), "certificate");
    // With one, from the URL...
    let url = format!("{}&{}", server.url(), certs.client_params("cert", "key"));
    let client = LockClient::connect(&url).await.unwrap();
    client
        .lock("m")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // ... or given in code, out of files the URL does not name.
    let identity = certs.client_identity();
    let client = LockClient::builder(server.url())
        .tls(identity)
        .build()
        .await
        .unwrap();
    let guard = client.lock("m").acquire().await.unwrap();
    assert!(server.get("lock:m").await.is_some());
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_ca_given_in_code_replaces_the_url_file() {
    let certs = Certificates::shared();
    let server = RedisServer::start_tls();
    let url = format!("rediss://127.0.0.1:{}", server.port());
    let client = LockClient::builder(&url)
        .tls(TlsConfig::new().ca_pem(std::fs::read(&certs.ca).unwrap()))
        .build()
        .await
        .unwrap();
    client
        .lock("c")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // Without it the system's roots are used, which do not hold the test CA.
    let error = refused(&url).await;
    connect_error(
        &error,
        server.port(),
        "not signed by a CA this client trusts",
    );
}

#[tokio::test]
async fn an_untrusted_certificate_is_refused_with_a_connect_error() {
    let certs = Certificates::shared();
    let server = RedisServer::start_tls();
    let url = format!(
        "rediss://127.0.0.1:{}/?cacert={}",
        server.port(),
        certs.other_ca.display()
    );
    let error = refused(&url).await;
    connect_error(
        &error,
        server.port(),
        "not signed by a CA this client trusts",
    );
    assert!(error.to_string().contains("cacert="), "{error}");
}

#[tokio::test]
async fn a_certificate_for_another_name_is_refused() {
    let certs = Certificates::shared();
    let server = RedisServer::start_tls_with(&[
        "--tls-auth-clients",
        "optional",
        "--tls-cert-file",
        certs.other_name_cert.to_str().unwrap(),
        "--tls-key-file",
        certs.other_name_key.to_str().unwrap(),
    ]);
    let error = refused(&server.url()).await;
    connect_error(&error, server.port(), "for another name");
}

#[tokio::test]
async fn plain_redis_cannot_talk_to_a_tls_port() {
    let server = RedisServer::start_tls();
    let error = refused(&format!("redis://127.0.0.1:{}", server.port())).await;
    connect_error(&error, server.port(), "rediss://");
}

#[tokio::test]
async fn tls_against_a_plain_server_says_so() {
    let server = RedisServer::start();
    let url = format!(
        "rediss://127.0.0.1:{}/?cacert={}",
        server.port(),
        Certificates::shared().ca.display()
    );
    let error = refused(&url).await;
    connect_error(&error, server.port(), "speak TLS on that port");
}

#[tokio::test]
async fn a_missing_ca_file_is_named() {
    let server = RedisServer::start_tls();
    let url = format!(
        "rediss://127.0.0.1:{}/?cacert=/nonexistent/ca.pem",
        server.port()
    );
    let error = refused(&url).await;
    connect_error(&error, server.port(), "`cacert=/nonexistent/ca.pem`");
}

#[tokio::test]
async fn a_wrong_password_over_tls_is_named_and_never_shown() {
    let server = RedisServer::start_tls_with(&[
        "--tls-auth-clients",
        "optional",
        "--requirepass",
        "right-pw",
    ]);
    let url = server.url().replace("right-pw", "wrong-pw");
    let error = refused(&url).await;
    connect_error(&error, server.port(), "authentication failed");
    assert!(
        !format!("{error} {error:?}").contains("wrong-pw"),
        "{error:?}"
    );
    // The password kept out of the URL works, and is not in the builder's Debug.
    let plain_url = server.url().replace(":right-pw@", "");
    let builder = LockClient::builder(&plain_url).password("right-pw");
    assert!(!format!("{builder:?}").contains("right-pw"));
    let client = builder.build().await.unwrap();
    client
        .lock("p")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn tls_files_on_a_plain_url_and_insecure_are_refused() {
    let ca = Certificates::shared().ca.display().to_string();
    for url in [
        format!("redis://127.0.0.1:1/?cacert={ca}"),
        "rediss://127.0.0.1:1/#insecure".to_owned(),
    ] {
        let error = LockClient::connect(&url).await.unwrap_err();
        assert!(matches!(error, LockError::Config(_)), "{url}: {error:?}");
    }
    let error = LockClient::builder("redis://127.0.0.1:1")
        .tls(TlsConfig::new().ca_pem(b"x".to_vec()))
        .build()
        .await
        .unwrap_err();
    assert!(error.to_string().contains("asks for no TLS"), "{error}");
}

#[tokio::test]
async fn sentinel_over_tls_finds_the_master_and_replicates() {
    let group = support::sentinel::SentinelGroup::start_tls(1, 1);
    let url = group.url("?replicas=1");
    assert!(url.starts_with("rediss+sentinel://"), "{url}");
    let one = LockClient::connect(&url).await.unwrap();
    let two = LockClient::connect(&url).await.unwrap();
    let held = one.lock("s").acquire().await.unwrap();
    let mut master = group.master_connection().await;
    let token: Option<String> = redis::cmd("GET")
        .arg("lock:s")
        .query_async(&mut master)
        .await
        .unwrap();
    assert!(token.is_some(), "the lock is on the master");
    match two.lock("s").wait(Duration::ZERO).acquire().await {
        Err(LockError::Busy { .. }) => {}
        other => panic!("a second client over TLS got {other:?}"),
    }
    // The waiter is woken through the master's pub/sub, over TLS too.
    let waiter =
        tokio::spawn(async move { two.lock("s").wait(Duration::from_secs(5)).acquire().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("woken by the release")
        .unwrap()
        .unwrap();
    second.release().await.unwrap();
    let gone: Option<String> = redis::cmd("GET")
        .arg("lock:s")
        .query_async(&mut master)
        .await
        .unwrap();
    assert_eq!(gone, None);
}
