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

/// base64url without padding, as JWTs are written.
fn b64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// A NATS JWT (`ed25519-nkey`) of `subject`, signed by `issuer`, with `nats` as its claims.
fn jwt(issuer: &support::nkeys::KeyPair, subject: &str, nats: &str) -> String {
    let header = b64url(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let iat = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let jti = unique("JTI").replace(['-', '.', ':'], "");
    let claims = format!(
        r#"{{"jti":"{jti}","iat":{iat},"iss":"{}","name":"distlock-test","sub":"{subject}","nats":{nats}}}"#,
        issuer.public_key()
    );
    let payload = b64url(claims.as_bytes());
    let signature = issuer
        .sign(format!("{header}.{payload}").as_bytes())
        .unwrap();
    format!("{header}.{payload}.{}", b64url(&signature))
}

/// A credentials file (`?creds=`): a user JWT its account signed and the user's NKey seed, on
/// a server in operator mode (the operator's JWT, the account's preloaded with JetStream on)
/// — what `nsc` makes. A user of an account the server does not know is refused, and a
/// missing file is named.
#[tokio::test]
async fn a_credentials_file_in_the_url_logs_in_as_its_user() {
    use support::nkeys::KeyPair;
    let operator = KeyPair::new_operator();
    let account = KeyPair::new_account();
    let operator_jwt = jwt(
        &operator,
        &operator.public_key(),
        r#"{"type":"operator","version":2}"#,
    );
    let limits = r#"{"subs":-1,"data":-1,"payload":-1,"imports":-1,"exports":-1,"wildcards":true,"conn":-1,"leaf":-1,"mem_storage":-1,"disk_storage":-1,"streams":-1,"consumer":-1}"#;
    let account_jwt = jwt(
        &operator,
        &account.public_key(),
        &format!(
            r#"{{"limits":{limits},"default_permissions":{{"pub":{{}},"sub":{{}}}},"type":"account","version":2}}"#
        ),
    );
    // The system account JetStream needs in operator mode.
    let system = KeyPair::new_account();
    let system_jwt = jwt(
        &operator,
        &system.public_key(),
        r#"{"limits":{"subs":-1,"data":-1,"payload":-1,"imports":-1,"exports":-1,"wildcards":true,"conn":-1,"leaf":-1},"type":"account","version":2}"#,
    );
    let user_claims =
        r#"{"pub":{},"sub":{},"subs":-1,"data":-1,"payload":-1,"type":"user","version":2}"#;
    let creds = |signer: &KeyPair| {
        let user = KeyPair::new_user();
        format!(
            "-----BEGIN NATS USER JWT-----\n{}\n------END NATS USER JWT------\n\n\
             -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
            jwt(signer, &user.public_key(), user_claims),
            user.seed().unwrap()
        )
    };
    let dir = std::env::temp_dir().join(unique("distlock-creds"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("server.conf");
    std::fs::write(
        &config,
        format!(
            "operator: {operator_jwt}\nsystem_account: {}\nresolver: MEMORY\n\
             resolver_preload: {{\n  {}: {account_jwt}\n  {}: {system_jwt}\n}}\n",
            system.public_key(),
            account.public_key(),
            system.public_key()
        ),
    )
    .unwrap();
    let (good, stranger) = (dir.join("app.creds"), dir.join("stranger.creds"));
    std::fs::write(&good, creds(&account)).unwrap();
    std::fs::write(&stranger, creds(&KeyPair::new_account())).unwrap();
    let server = NatsServer::start_with(&["-c", config.to_str().unwrap()]);
    let url = |file: &std::path::Path| {
        format!(
            "nats://127.0.0.1:{}?bucket={}&creds={}",
            server.port,
            bucket(),
            file.display()
        )
    };
    let client = LockClient::connect(&url(&good)).await.unwrap();
    let guard = client.lock("job").acquire().await.unwrap();
    let held = client
        .inspect("job")
        .await
        .unwrap()
        .expect("the server holds it");
    assert_eq!(
        held.token.as_deref(),
        Some(distlock::__private::testing::owner_token(&guard))
    );
    guard.release().await.unwrap();
    assert!(client.inspect("job").await.unwrap().is_none());
    let reason = refused(&url(&stranger)).await;
    assert!(reason.contains("refused the credentials"), "{reason}");
    let missing = dir.join("missing.creds");
    let reason = refused(&url(&missing)).await;
    assert!(reason.contains("missing.creds"), "{reason}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The value of `name`'s key as the stream's leader holds it: `None` when its last message is
/// a delete (or there is none).
async fn value_of(server: &NatsServer, bucket: &str, name: &str) -> Option<String> {
    let client = async_nats::connect(format!("127.0.0.1:{}", server.port))
        .await
        .unwrap();
    let stream = async_nats::jetstream::new(client)
        .get_stream(format!("KV_{bucket}"))
        .await
        .unwrap();
    let subject = format!(
        "$KV.{bucket}.{}",
        distlock::__private::testing::nats_key(name)
    );
    let message = stream
        .get_last_raw_message_by_subject(&subject)
        .await
        .ok()?;
    (message.headers.get("KV-Operation").is_none())
        .then(|| String::from_utf8_lossy(&message.payload).into_owned())
}

/// Readers and a writer waiting for them as the key's value holds them (the NATS rows of
/// docs/guide/read_write.md): a table (`distlock-table/1`) with a line per place — `hR` for
/// each reader's share, `wW` for the waiting writer's mark, which keeps new readers out —;
/// once the readers left, the writer alone is its bare token; released, nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_a_waiting_writer_are_lines_of_the_keys_table() {
    let server = NatsServer::shared();
    let bucket = bucket();
    let (one, two) = (
        LockClient::connect(&server.url(&bucket)).await.unwrap(),
        LockClient::connect(&server.url(&bucket)).await.unwrap(),
    );
    let first = one.lock("doc").read().acquire().await.unwrap();
    let second = two.lock("doc").read().acquire().await.unwrap();
    let writer = tokio::spawn({
        let one = one.clone();
        async move {
            one.lock("doc")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }
    });
    let marked = support::eventually(Duration::from_secs(5), || async {
        value_of(server, &bucket, "lock:doc")
            .await
            .is_some_and(|value| value.contains("\nwW "))
    })
    .await;
    assert!(marked, "the waiting writer left no mark");
    let table = value_of(server, &bucket, "lock:doc").await.unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines[0], "distlock-table/1", "{table}");
    for reader in [&first, &second] {
        let token = distlock::__private::testing::owner_token(reader);
        assert!(
            lines
                .iter()
                .any(|line| line.starts_with("hR ") && line.ends_with(token)),
            "{token} has no share line: {table}"
        );
    }
    assert_eq!(lines.len(), 4, "{table}");
    assert!(
        two.lock("doc")
            .read()
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "a reader joined past the waiting writer's mark"
    );
    first.release().await.unwrap();
    second.release().await.unwrap();
    let writer = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .expect("the last reader's release wakes the writer")
        .unwrap()
        .unwrap();
    let token = distlock::__private::testing::owner_token(&writer).to_owned();
    assert_eq!(
        value_of(server, &bucket, "lock:doc").await.as_deref(),
        Some(token.as_str()),
        "the writer alone is its bare token"
    );
    writer.release().await.unwrap();
    assert_eq!(value_of(server, &bucket, "lock:doc").await, None);
}
