//! NATS over TLS (`natss://`, `cacert=`, `cert=`/`key=` for mutual TLS), against a
//! `nats-server` that speaks TLS only (`--tls`, and `--tlsverify` for mutual TLS).
#![cfg(all(feature = "tls", feature = "nats"))]

use distlock::{LockClient, LockError};
use support::async_nats;
use support::certs::Certificates;
use support::nats::NatsServer;

use super::tls::{connect_error, refused};

fn natss(server: &NatsServer, query: &str) -> String {
    format!("natss://127.0.0.1:{}?bucket=tls&{query}", server.port)
}

/// The test's own look at the bucket, over TLS with the client certificate: the key of lock
/// `name` holds a put (a holder's token), or not.
async fn held(server: &NatsServer, name: &str) -> bool {
    let certs = Certificates::shared();
    let client = async_nats::ConnectOptions::new()
        .require_tls(true)
        .add_root_certificates(certs.ca.clone())
        .add_client_certificate(certs.client_cert.clone(), certs.client_key.clone())
        .connect(format!("127.0.0.1:{}", server.port))
        .await
        .expect("the test's own TLS connection");
    let js = async_nats::jetstream::new(client);
    let stream = js.get_stream("KV_tls").await.expect("the bucket's stream");
    let subject = format!(
        "$KV.tls.{}",
        distlock::__private::testing::nats_key(&format!("lock:{name}"))
    );
    match stream.get_last_raw_message_by_subject(&subject).await {
        Ok(message) => message.headers.get("KV-Operation").is_none(),
        Err(_) => false,
    }
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let certs = Certificates::shared();
    let server = NatsServer::start_tls(true);
    let ca = format!("cacert={}", certs.ca.display());
    let error = refused(&natss(&server, &ca)).await;
    connect_error(&error, server.port, "certificate");
    let url = natss(
        &server,
        &format!("{ca}&{}", certs.client_params("cert", "key")),
    );
    let client = LockClient::connect(&url).await.unwrap();
    assert_eq!(client.backend_kind(), "nats");
    let guard = client.lock("m").acquire().await.unwrap();
    assert!(held(&server, "m").await, "the server holds the lock");
    guard.release().await.unwrap();
    assert!(!held(&server, "m").await, "the release reached the server");
    // The identity given in code instead of the URL.
    let client = LockClient::builder(natss(&server, &ca))
        .tls(certs.client_identity())
        .build()
        .await
        .unwrap();
    let guard = client.lock("n").acquire().await.unwrap();
    assert!(held(&server, "n").await);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn bad_trust_and_plain_urls_are_named() {
    let certs = Certificates::shared();
    let server = NatsServer::start_tls(false);
    let port = server.port;
    let error = refused(&natss(
        &server,
        &format!("cacert={}", certs.other_ca.display()),
    ))
    .await;
    connect_error(&error, port, "not signed by a CA this client trusts");
    let error = refused(&natss(&server, "cacert=/nonexistent/ca.pem")).await;
    connect_error(&error, port, "`cacert=/nonexistent/ca.pem`");
    // A plain URL to the TLS server, and TLS to a plain one.
    let error = refused(&format!("nats://127.0.0.1:{port}?bucket=tls")).await;
    connect_error(&error, port, "natss://");
    let plain = NatsServer::start();
    let error = refused(&format!(
        "natss://127.0.0.1:{}?bucket=tls&cacert={}",
        plain.port,
        certs.ca.display()
    ))
    .await;
    connect_error(&error, plain.port, "does not speak it");
    // Files named in a URL that asks for no TLS are refused, not ignored.
    let error = LockClient::connect(&format!(
        "nats://127.0.0.1:{}?bucket=tls&cacert={}",
        plain.port,
        certs.ca.display()
    ))
    .await
    .unwrap_err();
    assert!(matches!(error, LockError::Config(_)), "{error:?}");
    assert!(error.to_string().contains("natss://"), "{error}");
    // Without TLS the same server works.
    let client = LockClient::connect(&plain.url("tls")).await.unwrap();
    client
        .lock("p")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}
