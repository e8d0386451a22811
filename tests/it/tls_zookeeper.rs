//! ZooKeeper over TLS (`zks://`, the servers' secure client port) and with digest
//! authentication (`user:password@`), whose lock nodes only that identity may delete.
#![cfg(all(feature = "tls", feature = "zookeeper"))]

use std::time::Duration;

use distlock::{LockClient, LockError};
use support::certs::Certificates;
use support::zookeeper::{ZkServer, client};

use super::tls::{connect_error, refused};

fn zks(server: &ZkServer, query: &str) -> String {
    format!(
        "zks://127.0.0.1:{}/tls?{query}",
        server.secure_port.expect("a TLS server")
    )
}

/// The error of a connection that fails: a `Connect`, or the backend's `connect` failure
/// naming the URL, with `says` in it.
fn names(error: &LockError, port: u16, says: &str) {
    let message = error.to_string();
    assert!(
        message.contains(&format!(":{port}")),
        "names the server: {message}"
    );
    assert!(message.contains(says), "says `{says}`: {message}");
}

#[tokio::test]
async fn locks_work_over_tls_and_the_server_answers_srvr_over_it() {
    let server = ZkServer::start_tls();
    // The server has just started: its first TLS handshakes (a cold JVM, on a machine busy with
    // the rest of the suite) took longer than the default connect timeout once. What this test
    // checks is that locks work over TLS, not how fast a new server's first session opens.
    let locks = LockClient::builder(server.url("/tls"))
        .connect_timeout(std::time::Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    let guard = locks.lock("t").acquire().await.unwrap();
    let zk = client(server.client_port).await;
    let queue = zk.list_children("/tls/lock:t").await.unwrap();
    assert_eq!(queue.len(), 1, "{queue:?}");
    guard.release().await.unwrap();
    let info = locks.ping().await.unwrap();
    assert!(info.version.starts_with("ZooKeeper 3."), "{info:?}");
    // `distlock check` says the session is encrypted, and reads the server's clock.
    let checkup = locks.check().await;
    assert!(checkup.passed(), "{checkup:#?}");
    let found = |check: &str| {
        checkup
            .findings
            .iter()
            .find(|f| f.check == check)
            .map(|f| f.found.clone())
            .unwrap_or_default()
    };
    assert!(found("identity").contains("over TLS"), "{checkup:#?}");
    assert!(found("clock").contains("from this host's"), "{checkup:#?}");
}

#[tokio::test]
async fn a_plain_url_against_the_secure_port_says_to_use_zks() {
    let server = ZkServer::start_tls();
    let url = format!("zk://127.0.0.1:{}/tls", server.secure_port.unwrap());
    let error = refused(&url).await;
    names(&error, server.secure_port.unwrap(), "zks://");
}

#[tokio::test]
async fn an_untrusted_ca_a_missing_ca_and_another_name_are_named() {
    let certs = Certificates::shared();
    let server = ZkServer::start_tls();
    let port = server.secure_port.unwrap();
    let error = refused(&zks(
        &server,
        &format!("cacert={}", certs.other_ca.display()),
    ))
    .await;
    names(&error, port, "not signed by a CA this client trusts");
    let error = refused(&zks(&server, "cacert=/nonexistent/ca.pem")).await;
    connect_error(&error, port, "`cacert=/nonexistent/ca.pem`");
    let error = LockClient::connect(&zks(&server, "")).await.unwrap_err();
    assert!(matches!(error, LockError::Config(_)), "{error:?}");
    assert!(error.to_string().contains("cacert="), "{error}");
    let other = ZkServer::start_tls_with(&certs.other_name_cert, &certs.other_name_key, "want");
    let error = refused(&zks(&other, &format!("cacert={}", certs.ca.display()))).await;
    names(&error, other.secure_port.unwrap(), "for another name");
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let certs = Certificates::shared();
    let server = ZkServer::start_tls_with(&certs.server_cert, &certs.server_key, "need");
    let ca = format!("cacert={}", certs.ca.display());
    let error = refused(&zks(&server, &ca)).await;
    names(&error, server.secure_port.unwrap(), "certificate");
    let url = zks(
        &server,
        &format!("{ca}&{}", certs.client_params("cert", "key")),
    );
    let client = LockClient::connect(&url).await.unwrap();
    client
        .lock("m")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn with_a_password_only_that_identity_may_touch_the_lock_nodes() {
    let server = ZkServer::start();
    let url = |userinfo: &str| format!("zk://{userinfo}127.0.0.1:{}/auth", server.client_port);
    let app = LockClient::connect(&url("app:secret@")).await.unwrap();
    // The chroot distlock made carries this identity's ACL: `distlock check` names both.
    let checkup = app.check().await;
    assert!(checkup.passed(), "{checkup:#?}");
    let acl = checkup.findings.iter().find(|f| f.check == "acl").unwrap();
    assert!(
        acl.found.contains("grants this identity `crdwa`") && acl.found.contains("digest:app:"),
        "{acl:?}"
    );
    let guard = app.lock("acl").acquire().await.unwrap();
    // A client without the identity can neither delete the holder's node nor queue behind it.
    let stranger = client(server.client_port).await;
    let queue = "/auth/lock:acl";
    let nodes = app_nodes(&server, queue).await;
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    assert_eq!(
        stranger
            .delete(&format!("{queue}/{}", nodes[0]), None)
            .await,
        Err(zookeeper_client::Error::NoAuth)
    );
    let wrong = LockClient::connect(&url("app:wrong@")).await.unwrap();
    match wrong
        .lock("acl")
        .wait(Duration::from_millis(200))
        .acquire()
        .await
    {
        Err(error) => assert!(error.to_string().to_lowercase().contains("auth"), "{error}"),
        Ok(_) => panic!("a client with another password took the lock"),
    }
    assert!(!guard.is_lost());
    assert_eq!(
        app_nodes(&server, queue).await,
        nodes,
        "the holder's node is untouched"
    );
    // The same identity in another client waits its turn as usual.
    let twin = LockClient::connect(&url("app:secret@")).await.unwrap();
    guard.release().await.unwrap();
    twin.lock("acl")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// The children of `queue`, read with the digest identity.
async fn app_nodes(server: &ZkServer, queue: &str) -> Vec<String> {
    let zk = zookeeper_client::Client::connector()
        .with_session_timeout(Duration::from_secs(30))
        .with_auth("digest", b"app:secret")
        .connect(&format!("127.0.0.1:{}", server.client_port))
        .await
        .unwrap();
    let mut nodes = zk.list_children(queue).await.unwrap();
    nodes.sort();
    nodes
}
