//! MySQL / MariaDB over TLS with the MySQL client's `ssl-mode` meanings, against a server that
//! accepts TLS connections only (`require_secure_transport = ON`).
#![cfg(all(feature = "tls", feature = "mysql"))]

use distlock::{LockClient, LockError};
use mysql_async::prelude::Queryable;
use support::certs::Certificates;
use support::mysql::{DATABASE, MysqlServer, PASSWORD, USER, X509_USER};

use super::tls::{connect_error, refused};

fn url(server: &MysqlServer, user: &str, query: &str) -> String {
    format!(
        "mysql://{user}:{PASSWORD}@127.0.0.1:{}/{DATABASE}?{query}",
        server.port()
    )
}

/// How many TLS handshakes the server has completed.
async fn tls_handshakes(server: &MysqlServer) -> u64 {
    let row: Option<(String, u64)> = server
        .conn()
        .await
        .query_first("SHOW GLOBAL STATUS LIKE 'Ssl_finished_accepts'")
        .await
        .expect("SHOW GLOBAL STATUS");
    row.expect("the server counts TLS handshakes").1
}

#[tokio::test]
async fn each_ssl_mode_connects_as_the_mysql_client_would() {
    let certs = Certificates::shared();
    let server = MysqlServer::start_tls();
    let ca = certs.ca.display();
    for query in [
        format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}"),
        // `REQUIRED` and the default `PREFERRED` encrypt without checking the certificate.
        "ssl-mode=REQUIRED".to_owned(),
        String::new(),
    ] {
        let before = tls_handshakes(&server).await;
        let client = LockClient::connect(&url(&server, USER, &query))
            .await
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        let guard = client.lock("modes").acquire().await.unwrap();
        let held: Option<String> = server
            .conn()
            .await
            .exec_first(
                "SELECT token FROM distlock_locks WHERE name = 'lock:modes'",
                (),
            )
            .await
            .unwrap();
        assert!(held.is_some(), "{query}: no row");
        guard.release().await.unwrap();
        // Every pooled connection (4 by default) shook hands over TLS.
        let handshakes = tls_handshakes(&server).await - before;
        assert!(handshakes >= 4, "{query}: {handshakes} TLS handshakes");
    }
}

#[tokio::test]
async fn a_plain_connection_to_a_tls_only_server_says_to_use_tls() {
    let server = MysqlServer::start_tls();
    let error = refused(&url(&server, USER, "ssl-mode=DISABLED")).await;
    connect_error(&error, server.port(), "TLS connections only");
    assert!(!error.to_string().contains(PASSWORD), "{error}");
}

#[tokio::test]
async fn an_untrusted_ca_and_a_missing_ca_file_are_named() {
    let certs = Certificates::shared();
    let server = MysqlServer::start_tls();
    let other = certs.other_ca.display();
    let error = refused(&url(
        &server,
        USER,
        &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={other}"),
    ))
    .await;
    connect_error(
        &error,
        server.port(),
        "not signed by a CA this client trusts",
    );
    assert!(error.to_string().contains("ssl-ca="), "{error}");
    let error = refused(&url(
        &server,
        USER,
        "ssl-mode=VERIFY_IDENTITY&ssl-ca=/nonexistent/ca.pem",
    ))
    .await;
    connect_error(&error, server.port(), "`ssl-ca=/nonexistent/ca.pem`");
}

#[tokio::test]
async fn a_user_that_requires_x509_gets_the_client_certificate() {
    let certs = Certificates::shared();
    let server = MysqlServer::start_tls();
    let verify = format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", certs.ca.display());
    let error = refused(&url(&server, X509_USER, &verify)).await;
    assert!(matches!(error, LockError::Connect { .. }), "{error:?}");
    let with_cert = format!("{verify}&{}", certs.client_params("ssl-cert", "ssl-key"));
    let client = LockClient::connect(&url(&server, X509_USER, &with_cert))
        .await
        .unwrap();
    client
        .lock("x509")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let identity = certs.client_identity();
    let client = LockClient::builder(url(&server, X509_USER, &verify))
        .tls(identity)
        .build()
        .await
        .unwrap();
    client
        .lock("x509")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn preferred_falls_back_to_plain_and_required_does_not() {
    let plain = MysqlServer::shared();
    let client = LockClient::connect(&url(plain, USER, ""))
        .await
        .expect("PREFERRED, no TLS offered");
    client
        .lock("fallback")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let error = refused(&url(plain, USER, "ssl-mode=REQUIRED")).await;
    connect_error(&error, plain.port(), "does not offer it");
}
