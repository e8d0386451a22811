//! The resource a lock protects, on the lock's own servers, written two ways: **fenced** (the
//! store refuses a write whose fencing token is below the highest it accepted, with
//! `distlock::fence`'s statements where the backend has one) and **plain** (no check: what a
//! holder without fencing does). The fault suite's paused holder writes both after its lease
//! ran out; the fenced write must be refused, the plain one lands.
//!
//! Per backend: a Redis hash (`fence::REDIS_FENCED_SET`; on Redlock the first node); a SQL row
//! guarded by `fence::SQL_FENCED_UPDATE` (`?` placeholders on MySQL); an etcd transaction that
//! writes only if the stored token (zero-padded, so etcd's byte order is numeric) is below the
//! writer's; a ZooKeeper node written with a version check after its stored token was compared;
//! a NATS key (in a bucket `fenced` beside the locks') updated at the revision whose stored
//! token was compared.

use std::time::Duration;
use tokio_postgres::types::Type;

use distlock::fence::{REDIS_FENCED_SET, SQL_FENCED_UPDATE};

use super::store::{self, Conn, Store};

/// One fenced resource (and its plain twin), opened from the lock URL.
pub struct Resource {
    name: String,
    at: At,
}

enum At {
    Redis(Conn),
    Postgres(tokio_postgres::Client),
    Mysql(mysql_async::Conn),
    Zookeeper(zookeeper_client::Client),
    Etcd(String),
    Nats(Box<async_nats::jetstream::kv::Store>),
}

impl Resource {
    /// Opens (and, the first time, creates) resource `name` — a plain identifier, unique per
    /// test — on the servers of `lock_url`.
    pub async fn open(lock_url: &str, name: &str) -> Resource {
        let base = lock_url.split('?').next().unwrap_or(lock_url);
        let at = match lock_url.split_once("://").map(|(scheme, _)| scheme) {
            Some("postgres" | "postgresql") => {
                let (client, connection) = tokio_postgres::connect(base, tokio_postgres::NoTls)
                    .await
                    .expect("connect to PostgreSQL");
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                client
                    .batch_execute(&format!(
                        "CREATE TABLE IF NOT EXISTS {name} (id bigint PRIMARY KEY, value text, \
                         fence bigint NOT NULL DEFAULT 0, plain text); \
                         INSERT INTO {name} (id, value) VALUES (1, 'initial') \
                         ON CONFLICT DO NOTHING"
                    ))
                    .await
                    .expect("the resource table");
                At::Postgres(client)
            }
            Some("mysql") => {
                use mysql_async::prelude::Queryable;
                let opts =
                    mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(base).unwrap())
                        .prefer_socket(false);
                let mut conn = mysql_async::Conn::new(opts)
                    .await
                    .expect("connect to MySQL");
                conn.query_drop(format!(
                    "CREATE TABLE IF NOT EXISTS {name} (id BIGINT PRIMARY KEY, value TEXT, \
                     fence BIGINT NOT NULL DEFAULT 0, plain TEXT)"
                ))
                .await
                .expect("the resource table");
                conn.query_drop(format!(
                    "INSERT IGNORE INTO {name} (id, value) VALUES (1, 'initial')"
                ))
                .await
                .expect("the resource row");
                At::Mysql(conn)
            }
            Some("zk") => {
                let rest = &lock_url["zk://".len()..];
                let hosts = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
                let zk = zookeeper_client::Client::connector()
                    .with_session_timeout(Duration::from_secs(30))
                    .connect(hosts)
                    .await
                    .expect("connect to ZooKeeper");
                let options = zookeeper_client::CreateMode::Persistent
                    .with_acls(zookeeper_client::Acls::anyone_all());
                for path in [format!("/{name}"), format!("/{name}-plain")] {
                    match zk.create(&path, b"0\ninitial", &options).await {
                        Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
                        Err(error) => panic!("create {path}: {error}"),
                    }
                }
                At::Zookeeper(zk)
            }
            Some("etcd") => {
                let rest = &lock_url["etcd://".len()..];
                let host = rest.split([',', '/', '?']).next().unwrap().to_owned();
                let fence = format!("{name}-fence");
                let zero = store::etcd::base64(&format!("{:020}", 0));
                // Created once, below every token.
                etcd(
                    &host,
                    "/v3/kv/txn",
                    format!(
                        r#"{{"compare":[{{"key":"{}","target":"CREATE","result":"EQUAL","create_revision":"0"}}],"success":[{{"request_put":{{"key":"{}","value":"{zero}"}}}}]}}"#,
                        store::etcd::base64(&fence),
                        store::etcd::base64(&fence),
                    ),
                )
                .await;
                At::Etcd(host)
            }
            Some("nats") => {
                let rest = &lock_url["nats://".len()..];
                let host = rest.split(['/', '?']).next().unwrap().to_owned();
                let client = async_nats::connect(host).await.expect("connect to NATS");
                let js = async_nats::jetstream::new(client);
                let kv = js
                    .create_key_value(async_nats::jetstream::kv::Config {
                        bucket: "fenced".into(),
                        ..Default::default()
                    })
                    .await
                    .expect("the resource's bucket");
                for key in [name.to_owned(), format!("{name}-plain")] {
                    // Made once (a second opening finds it).
                    let _ = kv.create(&key, "0\ninitial".into()).await;
                }
                At::Nats(Box::new(kv))
            }
            _ => match Store::open(lock_url, "fence")
                .await
                .expect("the Redis store")
            {
                Store::Redis { conn, .. } => At::Redis(conn),
                _ => unreachable!("a Redis URL opens a Redis store"),
            },
        };
        Resource {
            name: name.to_owned(),
            at,
        }
    }

    /// Writes `value` only if `token` is not below the highest token the resource accepted:
    /// `true` when written, `false` when refused as stale.
    pub async fn fenced_write(&mut self, value: &str, token: u64) -> bool {
        let name = self.name.as_str();
        match &mut self.at {
            At::Redis(conn) => {
                let written = match conn.clone() {
                    Conn::Single(mut c) => redis_fenced_set(&mut c, name, value, token).await,
                    Conn::Cluster(mut c) => redis_fenced_set(&mut c, name, value, token).await,
                    Conn::Sentinel(sentinel) => {
                        let mut c = sentinel.master().await.expect("the master");
                        redis_fenced_set(&mut c, name, value, token).await
                    }
                };
                written.expect("fenced write")
            }
            At::Postgres(client) => {
                let update = SQL_FENCED_UPDATE.replace("resource", name);
                // With its parameters' types, as the unnamed statement: one round trip that
                // works through a transaction pooler too (the lock URL may go through one).
                let update = format!("{update} RETURNING 1");
                let token = token as i64;
                let rows = client
                    .query_typed(
                        &update,
                        &[
                            (&token, Type::INT8),
                            (&value, Type::TEXT),
                            (&1_i64, Type::INT8),
                        ],
                    )
                    .await
                    .expect("fenced update");
                rows.len() == 1
            }
            At::Mysql(conn) => {
                use mysql_async::prelude::Queryable;
                // `?` placeholders in order of appearance: (value, token, id, token).
                assert_eq!(
                    SQL_FENCED_UPDATE,
                    "UPDATE resource SET value = $2, fence = $1 WHERE id = $3 AND fence <= $1",
                    "the shipped statement changed: adapt the parameter order below"
                );
                let update = SQL_FENCED_UPDATE
                    .replace("resource", name)
                    .replace("$1", "?")
                    .replace("$2", "?")
                    .replace("$3", "?");
                conn.exec_drop(update, (value, token as i64, 1_i64, token as i64))
                    .await
                    .expect("fenced update");
                conn.affected_rows() == 1
            }
            At::Zookeeper(zk) => {
                let path = format!("/{name}");
                loop {
                    let (data, stat) = zk.get_data(&path).await.expect("read the resource");
                    let data = String::from_utf8_lossy(&data).into_owned();
                    let highest: u64 = data.split('\n').next().unwrap().parse().unwrap();
                    if token < highest {
                        return false;
                    }
                    let new = format!("{token}\n{value}");
                    match zk.set_data(&path, new.as_bytes(), Some(stat.version)).await {
                        Ok(_) => return true,
                        Err(zookeeper_client::Error::BadVersion) => continue,
                        Err(error) => panic!("write the resource: {error}"),
                    }
                }
            }
            At::Etcd(host) => {
                let token = format!("{token:020}");
                let (key, fence) = (
                    store::etcd::base64(name),
                    store::etcd::base64(&format!("{name}-fence")),
                );
                let reply = etcd(
                    host,
                    "/v3/kv/txn",
                    format!(
                        r#"{{"compare":[{{"key":"{fence}","target":"VALUE","result":"LESS","value":"{}"}}],"success":[{{"request_put":{{"key":"{key}","value":"{}"}}}},{{"request_put":{{"key":"{fence}","value":"{}"}}}}]}}"#,
                        store::etcd::base64(&token),
                        store::etcd::base64(value),
                        store::etcd::base64(&token),
                    ),
                )
                .await;
                reply.contains(r#""succeeded":true"#)
            }
            At::Nats(kv) => loop {
                let entry = kv
                    .entry(name)
                    .await
                    .expect("read the resource")
                    .expect("the resource exists");
                let data = String::from_utf8_lossy(&entry.value).into_owned();
                let highest: u64 = data.split('\n').next().unwrap().parse().unwrap();
                if token < highest {
                    return false;
                }
                let new = format!("{token}\n{value}");
                match kv.update(name, new.into(), entry.revision).await {
                    Ok(_) => return true,
                    Err(error)
                        if error.kind()
                            == async_nats::jetstream::kv::UpdateErrorKind::WrongLastRevision =>
                    {
                        continue;
                    }
                    Err(error) => panic!("write the resource: {error}"),
                }
            },
        }
    }

    /// Writes `value` without any check.
    pub async fn plain_write(&mut self, value: &str) {
        let name = self.name.as_str();
        match &mut self.at {
            At::Redis(conn) => {
                let _: i64 = conn
                    .query(redis::cmd("HSET").arg(name).arg("plain").arg(value))
                    .await
                    .expect("HSET");
            }
            At::Postgres(client) => {
                let update = format!("UPDATE {name} SET plain = $1 WHERE id = 1");
                client
                    .query_typed(&update, &[(&value, Type::TEXT)])
                    .await
                    .expect("update");
            }
            At::Mysql(conn) => {
                use mysql_async::prelude::Queryable;
                let update = format!("UPDATE {name} SET plain = ? WHERE id = 1");
                conn.exec_drop(update, (value,)).await.expect("update");
            }
            At::Zookeeper(zk) => {
                let data = format!("0\n{value}");
                zk.set_data(&format!("/{name}-plain"), data.as_bytes(), None)
                    .await
                    .expect("write");
            }
            At::Etcd(host) => {
                etcd(
                    host,
                    "/v3/kv/put",
                    format!(
                        r#"{{"key":"{}","value":"{}"}}"#,
                        store::etcd::base64(&format!("plain-{name}")),
                        store::etcd::base64(value)
                    ),
                )
                .await;
            }
            At::Nats(kv) => {
                kv.put(format!("{name}-plain"), format!("0\n{value}").into())
                    .await
                    .expect("write");
            }
        }
    }

    /// `(fenced value, plain value)`.
    pub async fn values(&mut self) -> (String, String) {
        let name = self.name.as_str();
        match &mut self.at {
            At::Redis(conn) => {
                let (value, plain): (Option<String>, Option<String>) = conn
                    .query(redis::cmd("HMGET").arg(name).arg("value").arg("plain"))
                    .await
                    .expect("HMGET");
                (value.unwrap_or_default(), plain.unwrap_or_default())
            }
            At::Postgres(client) => {
                let rows = client
                    .query_typed(
                        &format!("SELECT value, plain FROM {name} WHERE id = 1"),
                        &[],
                    )
                    .await
                    .expect("select");
                let row = &rows[0];
                (
                    row.get::<_, Option<String>>(0).unwrap_or_default(),
                    row.get::<_, Option<String>>(1).unwrap_or_default(),
                )
            }
            At::Mysql(conn) => {
                use mysql_async::prelude::Queryable;
                let row: Option<(Option<String>, Option<String>)> = conn
                    .query_first(format!("SELECT value, plain FROM {name} WHERE id = 1"))
                    .await
                    .expect("select");
                let (value, plain) = row.expect("the resource row");
                (value.unwrap_or_default(), plain.unwrap_or_default())
            }
            At::Zookeeper(zk) => {
                let mut values = Vec::new();
                for path in [format!("/{name}"), format!("/{name}-plain")] {
                    let (data, _) = zk.get_data(&path).await.expect("read");
                    let data = String::from_utf8_lossy(&data).into_owned();
                    values.push(data.split_once('\n').unwrap().1.to_owned());
                }
                (values[0].clone(), values[1].clone())
            }
            At::Etcd(host) => {
                let mut values = Vec::new();
                for key in [name.to_owned(), format!("plain-{name}")] {
                    let reply = etcd(
                        host,
                        "/v3/kv/range",
                        format!(r#"{{"key":"{}"}}"#, store::etcd::base64(&key)),
                    )
                    .await;
                    values.push(
                        store::etcd::field(&reply, "value")
                            .map(|v| String::from_utf8(store::etcd::unbase64(&v).unwrap()).unwrap())
                            .unwrap_or_default(),
                    );
                }
                (values[0].clone(), values[1].clone())
            }
            At::Nats(kv) => {
                let mut values = Vec::new();
                for key in [name.to_owned(), format!("{name}-plain")] {
                    let data = kv.get(&key).await.expect("read").unwrap_or_default();
                    let data = String::from_utf8_lossy(&data).into_owned();
                    values.push(data.split_once('\n').unwrap().1.to_owned());
                }
                (values[0].clone(), values[1].clone())
            }
        }
    }
}

async fn etcd(host: &str, path: &str, body: String) -> String {
    store::etcd::call(&[host.to_owned()], path, &body)
        .await
        .expect("etcd's gateway answers")
}

/// Runs [`REDIS_FENCED_SET`] as a user would, with their own redis-rs connection: `true` when
/// written, `false` when refused as stale.
async fn redis_fenced_set<C>(
    conn: &mut C,
    key: &str,
    value: &str,
    token: u64,
) -> Result<bool, redis::RedisError>
where
    C: redis::aio::ConnectionLike + Send,
{
    let (written, _highest): (i64, i64) = redis::Script::new(REDIS_FENCED_SET)
        .key(key)
        .arg(token)
        .arg(value)
        .invoke_async(conn)
        .await?;
    Ok(written == 1)
}
