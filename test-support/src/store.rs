//! Named integers that every worker reads and writes in two separate steps: a map, Redis keys
//! (`redlock://`: on the first node; `redis+cluster://`: in the cluster), a PostgreSQL or MySQL
//! table, ZooKeeper nodes, or etcd keys (through etcd's JSON gateway).

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Mutex;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone)]
pub enum Store {
    Memory(Arc<Mutex<HashMap<String, u64>>>),
    Redis {
        conn: Conn,
        /// Prefix of this run's keys, so runs never see each other's data.
        namespace: String,
    },
    /// Rows of `distlock_example_store` (`name` = namespace + name); order ids go into
    /// `distlock_example_orders`, whose primary key refuses a duplicate.
    Postgres {
        client: Arc<tokio_postgres::Client>,
        namespace: String,
    },
    /// The same two tables in MySQL / MariaDB.
    Mysql {
        pool: mysql_async::Pool,
        namespace: String,
    },
    /// ZooKeeper nodes under `<chroot>/distlock-example/<namespace>`: a value is a node's
    /// data, an order id a child node (whose creation refuses a duplicate).
    Zookeeper {
        client: zookeeper_client::Client,
        /// `<chroot>/distlock-example/<namespace>`
        root: String,
    },
    /// etcd keys `distlock-example/<namespace>/<name>`; an order id is a key created only if
    /// absent.
    Etcd {
        /// `host:port` of each member.
        host: Arc<Vec<String>>,
        /// `distlock-example/<namespace>/`
        root: String,
    },
}

fn zk_persistent() -> zookeeper_client::CreateOptions<'static> {
    zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all())
}

impl Store {
    /// A map in this process for `memory://`, otherwise Redis keys under `namespace`.
    pub async fn open(url: &str, namespace: &str) -> Result<Store, BoxError> {
        if url.starts_with("memory://") {
            return Ok(Store::Memory(Arc::default()));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            // The lock URL may carry distlock's own parameters (`?table=…`): not the driver's.
            let base = url.split('?').next().unwrap_or(url);
            let (client, connection) = tokio_postgres::connect(base, tokio_postgres::NoTls).await?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            client
                .batch_execute(
                    "CREATE TABLE IF NOT EXISTS distlock_example_store \
                         (name text PRIMARY KEY, value bigint NOT NULL); \
                     CREATE TABLE IF NOT EXISTS distlock_example_orders \
                         (namespace text, id bigint, PRIMARY KEY (namespace, id))",
                )
                .await
                .or_else(|e| {
                    // Several processes creating the tables at once: one wins, the others
                    // see a duplicate; either way the tables exist.
                    match e.code() {
                        Some(code) if ["23505", "42P07", "42710"].contains(&code.code()) => Ok(()),
                        _ => Err(e),
                    }
                })?;
            return Ok(Store::Postgres {
                client: Arc::new(client),
                namespace: namespace.to_owned(),
            });
        }
        if let Some(rest) = url.strip_prefix("zk://") {
            let rest = rest.split('?').next().unwrap_or(rest);
            let (hosts, chroot) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let client = zookeeper_client::Client::connector()
                .with_session_timeout(std::time::Duration::from_secs(30))
                .connect(hosts)
                .await?;
            let root = format!(
                "{}/distlock-example/{namespace}",
                chroot.trim_end_matches('/')
            );
            match client
                .mkdir(&format!("{root}/orders"), &zk_persistent())
                .await
            {
                Ok(()) | Err(zookeeper_client::Error::NodeExists) => {}
                Err(e) => return Err(e.into()),
            }
            return Ok(Store::Zookeeper { client, root });
        }
        if let Some(rest) = url.strip_prefix("etcd://") {
            let hosts = rest.split(['/', '?']).next().unwrap_or(rest);
            let hosts = hosts
                .split(',')
                .map(|host| {
                    if host.contains(':') {
                        host.to_owned()
                    } else {
                        format!("{host}:2379")
                    }
                })
                .collect();
            return Ok(Store::Etcd {
                host: Arc::new(hosts),
                root: format!("distlock-example/{namespace}/"),
            });
        }
        if url.starts_with("mysql://") {
            use mysql_async::prelude::Queryable;
            let base = url.split('?').next().unwrap_or(url);
            let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(base)?)
                .prefer_socket(false);
            let pool = mysql_async::Pool::new(opts);
            let mut conn = pool.get_conn().await?;
            conn.query_drop(
                "CREATE TABLE IF NOT EXISTS distlock_example_store \
                 (name VARBINARY(512) PRIMARY KEY, value BIGINT NOT NULL)",
            )
            .await?;
            conn.query_drop(
                "CREATE TABLE IF NOT EXISTS distlock_example_orders \
                 (namespace VARBINARY(255), id BIGINT, PRIMARY KEY (namespace, id))",
            )
            .await?;
            return Ok(Store::Mysql {
                pool,
                namespace: namespace.to_owned(),
            });
        }
        let conn = match url.split_once("://") {
            Some(("redis+cluster", nodes)) => Conn::Cluster(
                redis::cluster::ClusterClient::new(
                    nodes
                        .split(',')
                        .map(|n| format!("redis://{n}"))
                        .collect::<Vec<_>>(),
                )?
                .get_async_connection()
                .await?,
            ),
            Some(("redis+sentinel", rest)) => Conn::Sentinel(Arc::new(Sentinel::parse(rest)?)),
            Some(("redlock", nodes)) => {
                let first = nodes.split(',').next().unwrap_or_default();
                Conn::Single(
                    redis::Client::open(format!("redis://{first}"))?
                        .get_multiplexed_async_connection()
                        .await?,
                )
            }
            _ => Conn::Single(
                redis::Client::open(url)?
                    .get_multiplexed_async_connection()
                    .await?,
            ),
        };
        Ok(Store::Redis {
            conn,
            namespace: namespace.to_owned(),
        })
    }

    pub async fn get(&self, name: &str) -> Result<u64, BoxError> {
        Ok(match self {
            Store::Memory(map) => map.lock().await.get(name).copied().unwrap_or(0),
            Store::Redis { conn, namespace } => {
                let value: Option<u64> = conn
                    .query(redis::cmd("GET").arg(format!("{namespace}:{name}")))
                    .await?;
                value.unwrap_or(0)
            }
            Store::Postgres { client, namespace } => {
                let row = client
                    .query_opt(
                        "SELECT value FROM distlock_example_store WHERE name = $1",
                        &[&format!("{namespace}:{name}")],
                    )
                    .await?;
                row.map_or(0, |r| r.get::<_, i64>(0) as u64)
            }
            Store::Mysql { pool, namespace } => {
                use mysql_async::prelude::Queryable;
                let value: Option<i64> = pool
                    .get_conn()
                    .await?
                    .exec_first(
                        "SELECT value FROM distlock_example_store WHERE name = ?",
                        (format!("{namespace}:{name}"),),
                    )
                    .await?;
                value.unwrap_or(0) as u64
            }
            Store::Etcd { host, root } => {
                let reply = etcd::call(
                    host,
                    "/v3/kv/range",
                    &format!(r#"{{"key":"{}"}}"#, etcd::base64(&format!("{root}{name}"))),
                )
                .await?;
                match etcd::field(&reply, "value") {
                    Some(value) => String::from_utf8(etcd::unbase64(&value)?)?.parse()?,
                    None => 0,
                }
            }
            Store::Zookeeper { client, root } => {
                match client.get_data(&format!("{root}/{name}")).await {
                    Ok((data, _)) => String::from_utf8(data)?.parse()?,
                    Err(zookeeper_client::Error::NoNode) => 0,
                    Err(e) => return Err(e.into()),
                }
            }
        })
    }

    pub async fn set(&self, name: &str, value: u64) -> Result<(), BoxError> {
        match self {
            Store::Memory(map) => {
                map.lock().await.insert(name.to_owned(), value);
            }
            Store::Redis { conn, namespace } => {
                let () = conn
                    .query(
                        redis::cmd("SET")
                            .arg(format!("{namespace}:{name}"))
                            .arg(value),
                    )
                    .await?;
            }
            Store::Postgres { client, namespace } => {
                client
                    .execute(
                        "INSERT INTO distlock_example_store (name, value) VALUES ($1, $2) \
                         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                        &[&format!("{namespace}:{name}"), &(value as i64)],
                    )
                    .await?;
            }
            Store::Mysql { pool, namespace } => {
                use mysql_async::prelude::Queryable;
                pool.get_conn()
                    .await?
                    .exec_drop(
                        "INSERT INTO distlock_example_store (name, value) VALUES (?, ?) \
                         ON DUPLICATE KEY UPDATE value = VALUES(value)",
                        (format!("{namespace}:{name}"), value as i64),
                    )
                    .await?;
            }
            Store::Etcd { host, root } => {
                etcd::call(
                    host,
                    "/v3/kv/put",
                    &format!(
                        r#"{{"key":"{}","value":"{}"}}"#,
                        etcd::base64(&format!("{root}{name}")),
                        etcd::base64(&value.to_string())
                    ),
                )
                .await?;
            }
            Store::Zookeeper { client, root } => {
                let path = format!("{root}/{name}");
                let data = value.to_string();
                match client.set_data(&path, data.as_bytes(), None).await {
                    Ok(_) => {}
                    Err(zookeeper_client::Error::NoNode) => {
                        client
                            .create(&path, data.as_bytes(), &zk_persistent())
                            .await?;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    /// Records a new order id where the storage refuses a duplicate: a table whose primary key
    /// is the id (PostgreSQL), a set (Redis, memory). Errors if the id was handed out before.
    pub async fn record_order(&self, id: u64) -> Result<(), BoxError> {
        let fresh = match self {
            Store::Memory(map) => map.lock().await.insert(format!("order:{id}"), id).is_none(),
            Store::Redis { conn, namespace } => {
                let added: i64 = conn
                    .query(
                        redis::cmd("SADD")
                            .arg(format!("{namespace}:orders"))
                            .arg(id),
                    )
                    .await?;
                added == 1
            }
            Store::Postgres { client, namespace } => client
                .execute(
                    "INSERT INTO distlock_example_orders (namespace, id) VALUES ($1, $2)",
                    &[namespace, &(id as i64)],
                )
                .await
                .map(|_| true)
                .or_else(|e| match e.code() {
                    Some(code) if code.code() == "23505" => Ok(false), // unique_violation
                    _ => Err(e),
                })?,
            Store::Mysql { pool, namespace } => {
                use mysql_async::prelude::Queryable;
                let inserted = pool
                    .get_conn()
                    .await?
                    .exec_drop(
                        "INSERT INTO distlock_example_orders (namespace, id) VALUES (?, ?)",
                        (namespace.as_str(), id as i64),
                    )
                    .await;
                match inserted {
                    Ok(()) => true,
                    Err(mysql_async::Error::Server(e)) if e.code == 1062 => false, // duplicate
                    Err(e) => return Err(e.into()),
                }
            }
            Store::Etcd { host, root } => {
                let key = etcd::base64(&format!("{root}orders/{id}"));
                let reply = etcd::call(
                    host,
                    "/v3/kv/txn",
                    &format!(
                        r#"{{"compare":[{{"key":"{key}","target":"CREATE","result":"EQUAL","create_revision":"0"}}],"success":[{{"request_put":{{"key":"{key}","value":""}}}}]}}"#
                    ),
                )
                .await?;
                reply.contains(r#""succeeded":true"#)
            }
            Store::Zookeeper { client, root } => {
                let path = format!("{root}/orders/{id}");
                match client.create(&path, &[], &zk_persistent()).await {
                    Ok(_) => true,
                    Err(zookeeper_client::Error::NodeExists) => false,
                    Err(e) => return Err(e.into()),
                }
            }
        };
        if fresh {
            Ok(())
        } else {
            Err(format!("order id {id} was handed out twice").into())
        }
    }

    /// Deletes this run's keys (Redis); nothing to do in memory.
    pub async fn clear(&self, names: &[&str]) -> Result<(), BoxError> {
        match self {
            Store::Memory(_) => {}
            Store::Redis { conn, namespace } => {
                for name in names {
                    let _: i64 = conn
                        .query(redis::cmd("DEL").arg(format!("{namespace}:{name}")))
                        .await?;
                }
                let _: i64 = conn
                    .query(redis::cmd("DEL").arg(format!("{namespace}:orders")))
                    .await?;
            }
            Store::Postgres { client, namespace } => {
                for name in names {
                    client
                        .execute(
                            "DELETE FROM distlock_example_store WHERE name = $1",
                            &[&format!("{namespace}:{name}")],
                        )
                        .await?;
                }
                client
                    .execute(
                        "DELETE FROM distlock_example_orders WHERE namespace = $1",
                        &[namespace],
                    )
                    .await?;
            }
            Store::Mysql { pool, namespace } => {
                use mysql_async::prelude::Queryable;
                let mut conn = pool.get_conn().await?;
                for name in names {
                    conn.exec_drop(
                        "DELETE FROM distlock_example_store WHERE name = ?",
                        (format!("{namespace}:{name}"),),
                    )
                    .await?;
                }
                conn.exec_drop(
                    "DELETE FROM distlock_example_orders WHERE namespace = ?",
                    (namespace.as_str(),),
                )
                .await?;
            }
            Store::Etcd { host, root } => {
                etcd::call(
                    host,
                    "/v3/kv/deleterange",
                    &format!(
                        r#"{{"key":"{}","range_end":"{}"}}"#,
                        etcd::base64(root),
                        etcd::base64(&format!("{}0", root.trim_end_matches('/')))
                    ),
                )
                .await?;
            }
            Store::Zookeeper { client, root } => {
                let orders = format!("{root}/orders");
                for child in client.list_children(&orders).await.unwrap_or_default() {
                    let _ = client.delete(&format!("{orders}/{child}"), None).await;
                }
                for name in names.iter().copied().chain(["orders"]) {
                    let _ = client.delete(&format!("{root}/{name}"), None).await;
                }
                let _ = client.delete(root, None).await;
            }
        }
        Ok(())
    }
}

/// etcd's JSON gateway (`POST /v3/kv/…` on the client port), spoken over plain HTTP/1.0.
pub mod etcd {
    use std::time::{Duration, Instant};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::BoxError;

    /// Posts `body` to `path` on the first member of `hosts` that answers, retrying for up to
    /// 30 s while none does (a member down, a leader election under way); the reply's body.
    pub async fn call(hosts: &[String], path: &str, body: &str) -> Result<String, BoxError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut last = None;
            for host in hosts {
                match call_one(host, path, body).await {
                    Ok(reply) => return Ok(reply),
                    Err(error) => last = Some(error),
                }
            }
            if Instant::now() > deadline {
                return Err(last.unwrap_or_else(|| "no etcd host".into()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// One call to one member; errors name the call.
    pub async fn call_one(host: &str, path: &str, body: &str) -> Result<String, BoxError> {
        let mut stream = tokio::net::TcpStream::connect(host).await?;
        let request = format!(
            "POST {path} HTTP/1.0\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await?;
        let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
        if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
            return Err(format!("etcd {path} at {host}: {head} {body}").into());
        }
        Ok(body.to_owned())
    }

    /// The string value of the first `"name":"…"` in `json`.
    pub fn field(json: &str, name: &str) -> Option<String> {
        let start = json.find(&format!("\"{name}\":\""))? + name.len() + 4;
        Some(json[start..].split('"').next()?.to_owned())
    }

    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub fn base64(text: &str) -> String {
        let mut out = String::new();
        for chunk in text.as_bytes().chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    pub fn unbase64(text: &str) -> Result<Vec<u8>, BoxError> {
        let mut out = Vec::new();
        let mut bits = 0u32;
        let mut count = 0;
        for c in text.bytes().filter(|&c| c != b'=') {
            let v = ALPHABET
                .iter()
                .position(|&a| a == c)
                .ok_or("etcd sent invalid base64")? as u32;
            bits = bits << 6 | v;
            count += 6;
            if count >= 8 {
                count -= 8;
                out.push((bits >> count) as u8);
                bits &= (1 << count) - 1;
            }
        }
        Ok(out)
    }
}

/// A connection to one Redis server or to a Redis Cluster.
#[derive(Clone)]
pub enum Conn {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
    Sentinel(Arc<Sentinel>),
}

impl Conn {
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        match self.clone() {
            Conn::Single(mut conn) => cmd.query_async(&mut conn).await,
            Conn::Cluster(mut conn) => cmd.query_async(&mut conn).await,
            Conn::Sentinel(sentinel) => sentinel.query(cmd).await,
        }
    }
}

/// The master of a Redis Sentinel service (`redis+sentinel://s1,s2/service[?replicas=N]`), found
/// again after a failover: a command that fails is retried on the master the sentinels name
/// then, for up to 30 s (the examples' values are read and written whole, so a retry is
/// harmless); with `replicas=N` each command is followed by `WAIT N`, and retried until that
/// many replicas have it (a write a failover could undo is not taken as done).
pub struct Sentinel {
    sentinels: Vec<String>,
    service: String,
    replicas: i64,
    master: Mutex<Option<redis::aio::MultiplexedConnection>>,
}

impl Sentinel {
    fn parse(rest: &str) -> Result<Sentinel, BoxError> {
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (hosts, service) = rest.split_once('/').ok_or("no service name in the URL")?;
        let replicas = query
            .split('&')
            .find_map(|pair| pair.strip_prefix("replicas="))
            .map_or(Ok(0), str::parse)?;
        Ok(Sentinel {
            sentinels: hosts.split(',').map(str::to_owned).collect(),
            service: service.split('/').next().unwrap_or(service).to_owned(),
            replicas,
            master: Mutex::new(None),
        })
    }

    async fn connect(&self) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        let mut last = None;
        for sentinel in &self.sentinels {
            let asked = async {
                let mut conn = redis::Client::open(format!("redis://{sentinel}"))?
                    .get_multiplexed_async_connection()
                    .await?;
                let (host, port): (String, u16) = redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.service)
                    .query_async(&mut conn)
                    .await?;
                let mut master = redis::Client::open(format!("redis://{host}:{port}"))?
                    .get_multiplexed_async_connection()
                    .await?;
                let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut master).await?;
                match role.first() {
                    Some(redis::Value::BulkString(role)) if role == b"master" => Ok(master),
                    _ => Err(redis::RedisError::from((
                        redis::ErrorKind::Client,
                        "not the master yet",
                    ))),
                }
            };
            match asked.await {
                Ok(master) => return Ok(master),
                Err(error) => last = Some(error),
            }
        }
        Err(last.unwrap_or_else(|| (redis::ErrorKind::Client, "no sentinels").into()))
    }

    /// A connection to the master the sentinels name now.
    pub async fn master(&self) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        let mut master = self.master.lock().await;
        if master.is_none() {
            *master = Some(self.connect().await?);
        }
        Ok(master.clone().expect("connected"))
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let tried = async {
                let mut master = self.master.lock().await;
                if master.is_none() {
                    *master = Some(self.connect().await?);
                }
                let conn = master.as_mut().expect("connected");
                if self.replicas > 0 {
                    let mut pipe = redis::pipe();
                    pipe.add_command(cmd.clone())
                        .cmd("WAIT")
                        .arg(self.replicas)
                        .arg(1_000);
                    let (value, acked): (redis::Value, i64) = pipe.query_async(conn).await?;
                    if acked < self.replicas {
                        return Err((redis::ErrorKind::Client, "not acknowledged").into());
                    }
                    return Ok(redis::from_redis_value(value)?);
                }
                cmd.query_async(conn).await
            };
            match tried.await {
                Ok(value) => return Ok(value),
                Err(_) if std::time::Instant::now() < deadline => {
                    *self.master.lock().await = None;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(error) => return Err(error),
            }
        }
    }
}

/// Reads `DISTLOCK_URL` (or falls back to `memory://`, saying so) and installs the global lock
/// client. Returns the URL.
pub async fn init_lock_client(quiet: bool) -> Result<String, BoxError> {
    let url = match std::env::var(distlock::LockClient::URL_ENV) {
        Ok(url) => url,
        Err(_) => {
            if !quiet {
                println!(
                    "DISTLOCK_URL is not set: using the embedded memory:// backend (one process only)"
                );
            }
            "memory://".to_string()
        }
    };
    distlock::init(distlock::LockClient::connect(&url).await?)?;
    Ok(url)
}
