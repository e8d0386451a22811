//! PostgreSQL over TLS with libpq's `sslmode` meanings, against a server that accepts TLS
//! connections only (`hostssl` lines alone in its pg_hba.conf, as managed offerings run).
#![cfg(all(feature = "tls", feature = "postgres"))]

use distlock::{LockClient, LockError};
use support::certs::Certificates;
use support::postgres::{PASSWORD, PostgresServer};

use super::tls::{connect_error, refused, refused_with};

fn url(server: &PostgresServer, query: &str) -> String {
    format!(
        "postgres://postgres:{PASSWORD}@127.0.0.1:{}/postgres?{query}",
        server.port()
    )
}

#[tokio::test]
async fn each_sslmode_connects_as_libpq_would() {
    let certs = Certificates::shared();
    let server = PostgresServer::start_tls();
    let ca = certs.ca.display();
    for query in [
        format!("sslmode=verify-full&sslrootcert={ca}"),
        format!("sslmode=verify-ca&sslrootcert={ca}"),
        // `require` and the default `prefer` encrypt without checking the certificate...
        "sslmode=require".to_owned(),
        String::new(),
        // ... unless a CA is given: then they check the chain, as libpq does.
        format!("sslmode=require&sslrootcert={ca}"),
    ] {
        let client = LockClient::connect(&url(&server, &query))
            .await
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        let guard = client.lock("modes").acquire().await.unwrap();
        let held: i64 = server
            .client()
            .await
            .query_one(
                "SELECT count(*) FROM distlock_locks WHERE name = 'lock:modes'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(held, 1, "{query}");
        guard.release().await.unwrap();
    }
    // The server saw TLS on every TCP connection distlock made.
    let plain: i64 = server
        .client()
        .await
        .query_one(
            "SELECT count(*) FROM pg_stat_activity a LEFT JOIN pg_stat_ssl s USING (pid) \
             WHERE a.client_addr IS NOT NULL AND NOT coalesce(s.ssl, false)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(plain, 0, "a plain TCP connection reached the server");
}

#[tokio::test]
async fn a_plain_connection_to_a_tls_only_server_says_to_use_tls() {
    let server = PostgresServer::start_tls();
    let error = refused(&url(&server, "sslmode=disable")).await;
    connect_error(&error, server.port(), "sslmode=verify-full");
    assert!(!error.to_string().contains(PASSWORD), "{error}");
}

#[tokio::test]
async fn verify_full_checks_the_name_and_verify_ca_does_not() {
    let certs = Certificates::shared();
    let server = PostgresServer::start_tls_with(
        &certs.other_name_cert,
        &certs.other_name_key,
        "scram-sha-256",
    );
    let ca = certs.ca.display();
    let error = refused(&url(
        &server,
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    ))
    .await;
    connect_error(&error, server.port(), "for another name");
    let client = LockClient::connect(&url(
        &server,
        &format!("sslmode=verify-ca&sslrootcert={ca}"),
    ))
    .await
    .expect("verify-ca checks the chain only");
    client
        .lock("ca")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn an_untrusted_ca_and_a_missing_ca_file_are_named() {
    let certs = Certificates::shared();
    let server = PostgresServer::start_tls();
    let other = certs.other_ca.display();
    let error = refused(&url(
        &server,
        &format!("sslmode=verify-full&sslrootcert={other}"),
    ))
    .await;
    connect_error(
        &error,
        server.port(),
        "not signed by a CA this client trusts",
    );
    assert!(error.to_string().contains("sslrootcert="), "{error}");
    let error = refused(&url(
        &server,
        "sslmode=verify-full&sslrootcert=/nonexistent/root.crt",
    ))
    .await;
    connect_error(&error, server.port(), "`sslrootcert=/nonexistent/root.crt`");
}

#[tokio::test]
async fn a_client_certificate_is_presented_when_the_server_wants_one() {
    let certs = Certificates::shared();
    let server = PostgresServer::start_tls_with(
        &certs.server_cert,
        &certs.server_key,
        "scram-sha-256 clientcert=verify-ca",
    );
    let ca = certs.ca.display();
    let verify = format!("sslmode=verify-full&sslrootcert={ca}");
    let error = refused(&url(&server, &verify)).await;
    assert!(matches!(error, LockError::Connect { .. }), "{error:?}");
    let with_cert = format!("{verify}&{}", certs.client_params("sslcert", "sslkey"));
    let client = LockClient::connect(&url(&server, &with_cert))
        .await
        .unwrap();
    client
        .lock("mtls")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // The same identity given in code.
    let identity = certs.client_identity();
    let client = LockClient::builder(url(&server, &verify))
        .tls(identity)
        .build()
        .await
        .unwrap();
    client
        .lock("mtls")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn tls_required_of_a_plain_server_and_a_wrong_password_are_named() {
    let plain = PostgresServer::shared();
    let error = refused(&url(plain, "sslmode=require")).await;
    connect_error(&error, plain.port(), "does not offer it");
    let server = PostgresServer::start_tls();
    let wrong = url(&server, "sslmode=require").replace(PASSWORD, "wrong-pw");
    let error = refused(&wrong).await;
    assert!(matches!(error, LockError::Connect { .. }), "{error:?}");
    assert!(
        !format!("{error} {error:?}").contains("wrong-pw"),
        "{error:?}"
    );
    // The right one, kept out of the URL.
    let no_password = url(&server, "sslmode=require").replace(&format!(":{PASSWORD}@"), "@");
    let error = refused_with(LockClient::builder(&no_password)).await;
    assert!(matches!(error, LockError::Connect { .. }), "{error:?}");
    let client = LockClient::builder(&no_password)
        .password(PASSWORD)
        .build()
        .await
        .unwrap();
    client
        .lock("pw")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // A mode libpq has but distlock does not, and a contradiction, fail before connecting.
    for query in ["sslmode=allow", "sslmode=disable&sslrootcert=/x"] {
        let error = LockClient::connect(&url(&server, query)).await.unwrap_err();
        assert!(matches!(error, LockError::Config(_)), "{query}: {error:?}");
    }
}
