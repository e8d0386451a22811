//! etcd over TLS (`etcds://`, mutual TLS as etcd's docs set it up) and with its authentication
//! (`user:password@`): a token sent with every call and stream, renewed when etcd lets it
//! expire.
#![cfg(all(feature = "tls", feature = "etcd"))]

use std::time::Duration;

use distlock::{LockClient, LockError};
use support::certs::Certificates;
use support::etcd::EtcdMember;

use super::tls::{connect_error, refused};

fn etcds(member: &EtcdMember, query: &str) -> String {
    format!(
        "etcds://127.0.0.1:{}/tls?{query}",
        member.tls_port.expect("a TLS member")
    )
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let certs = Certificates::shared();
    let member = EtcdMember::start_tls(true, &[]);
    let port = member.tls_port.unwrap();
    let ca = format!("cacert={}", certs.ca.display());
    let error = refused(&etcds(&member, &ca)).await;
    connect_error(&error, port, "certificate");
    let client = LockClient::connect(&member.url("tls")).await.unwrap();
    let guard = client.lock("m").acquire().await.unwrap();
    let inspector = distlock::__private::testing::EtcdInspector::new(&format!(
        "127.0.0.1:{}",
        member.client_port
    ));
    assert_eq!(inspector.keys("tls/lock:m/").await.len(), 1);
    guard.release().await.unwrap();
    assert!(inspector.keys("tls/lock:m/").await.is_empty());
    // `distlock check` says the connection is encrypted (no user: no role line).
    let checkup = client.check().await;
    assert!(checkup.passed(), "{checkup:#?}");
    let identity = checkup
        .findings
        .iter()
        .find(|f| f.check == "identity")
        .unwrap();
    assert!(identity.found.contains("over TLS"), "{identity:?}");
    assert!(!checkup.findings.iter().any(|f| f.check == "role"));
}

#[tokio::test]
async fn bad_trust_and_plain_urls_are_named() {
    let certs = Certificates::shared();
    let member = EtcdMember::start_tls(false, &[]);
    let port = member.tls_port.unwrap();
    let error = refused(&etcds(
        &member,
        &format!("cacert={}", certs.other_ca.display()),
    ))
    .await;
    connect_error(&error, port, "not signed by a CA this client trusts");
    let error = refused(&etcds(&member, "cacert=/nonexistent/ca.pem")).await;
    connect_error(&error, port, "`cacert=/nonexistent/ca.pem`");
    // Plain gRPC to the TLS port, and TLS to the plain one.
    let error = refused(&format!("etcd://127.0.0.1:{port}/tls")).await;
    connect_error(&error, port, "etcds://");
    let plain = member.client_port;
    let error = refused(&format!(
        "etcds://127.0.0.1:{plain}/tls?cacert={}",
        certs.ca.display()
    ))
    .await;
    connect_error(&error, plain, "does not speak it");
    // Without the feature's URL form, files are refused.
    let error = LockClient::connect(&format!(
        "etcd://127.0.0.1:{plain}/tls?cacert={}",
        certs.ca.display()
    ))
    .await
    .unwrap_err();
    assert!(matches!(error, LockError::Config(_)), "{error:?}");
}

#[tokio::test]
async fn a_password_logs_in_and_a_wrong_one_is_named_and_never_shown() {
    let member = EtcdMember::start();
    member.enable_auth("app", "app-pw");
    let url = |userinfo: &str| format!("etcd://{userinfo}127.0.0.1:{}/auth", member.client_port);
    let client = LockClient::connect(&url("app:app-pw@")).await.unwrap();
    // `distlock check` names the user and its `root` role.
    let checkup = client.check().await;
    assert!(checkup.passed(), "{checkup:#?}");
    let role = checkup.findings.iter().find(|f| f.check == "role").unwrap();
    assert!(role.found.contains("`app` has the role `root`"), "{role:?}");
    let guard = client.lock("a").acquire().await.unwrap();
    assert!(client.inspect("a").await.unwrap().is_some());
    guard.release().await.unwrap();
    assert!(client.inspect("a").await.unwrap().is_none());
    let error = refused(&url("app:wrong-pw@")).await;
    connect_error(&error, member.client_port, "authentication as `app` failed");
    assert!(
        !format!("{error} {error:?}").contains("wrong-pw"),
        "{error:?}"
    );
    // Kept out of the URL.
    let client = LockClient::builder(url("app@").replace("app@", "app:x@"))
        .password("app-pw")
        .build()
        .await
        .unwrap();
    client
        .lock("b")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn an_expired_token_is_renewed_for_calls_and_watches() {
    // etcd forgets a token idle for a second (the sweep runs every second).
    let member = EtcdMember::start_tls(false, &["--auth-token-ttl", "1"]);
    member.enable_auth("app", "app-pw");
    let certs = Certificates::shared();
    let url = format!(
        "etcds://app:app-pw@127.0.0.1:{}/ttl?cacert={}",
        member.tls_port.unwrap(),
        certs.ca.display()
    );
    let holder = LockClient::connect(&url).await.unwrap();
    let waiter = LockClient::connect(&url).await.unwrap();
    // The waiter's watch stream opens with its first token.
    let first = holder.lock("a").acquire().await.unwrap();
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            waiter
                .lock("a")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.release().await.unwrap();
    waiting.await.unwrap().unwrap().release().await.unwrap();
    // Both tokens expire.
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let second = holder
        .lock("b")
        .acquire()
        .await
        .expect("a call renews the token");
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            waiter
                .lock("b")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = std::time::Instant::now();
    second.release().await.unwrap();
    let got = waiting
        .await
        .unwrap()
        .expect("a watch on a stream with an expired token is renewed");
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "woken {:?} after the release",
        released.elapsed()
    );
    got.release().await.unwrap();
}
