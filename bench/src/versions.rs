//! Each store's server version, asked of the server the rows ran against (the rows' *server*
//! column). A server that does not answer gives "unknown (…)", never a failed run.

use support::RedisServer;

/// `INFO server`'s `redis_version`.
pub async fn redis(server: &RedisServer) -> String {
    let mut conn = server.connection().await;
    redis_of(&mut conn).await
}

/// `redis_version` through any connection (a cluster's routes `INFO` to one node).
pub async fn redis_of(conn: &mut impl redis::aio::ConnectionLike) -> String {
    let info: Result<String, _> = redis::cmd("INFO").arg("server").query_async(conn).await;
    match info {
        Ok(info) => info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .map_or_else(
                || "unknown (no redis_version)".to_owned(),
                |v| format!("Redis {}", v.trim()),
            ),
        Err(e) => format!("unknown ({e})"),
    }
}

/// `SHOW server_version`.
pub async fn postgres(url: &str) -> String {
    let asked = async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let row = client.query_one("SHOW server_version", &[]).await?;
        Ok::<String, tokio_postgres::Error>(row.get(0))
    };
    match asked.await {
        // "15.14 (Debian 15.14-0+deb12u1)": the version, without the packager's.
        Ok(v) => format!("PostgreSQL {}", v.split_whitespace().next().unwrap_or(&v)),
        Err(e) => format!("unknown ({e})"),
    }
}

/// `pgbouncer --version`.
pub fn pgbouncer() -> String {
    let binary = ["pgbouncer", "/usr/sbin/pgbouncer"]
        .into_iter()
        .find_map(|b| std::process::Command::new(b).arg("--version").output().ok());
    match binary {
        Some(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            let first = text.lines().next().unwrap_or("").trim();
            match first.is_empty() {
                true => "PgBouncer (version unknown)".to_owned(),
                false => first.to_owned(),
            }
        }
        None => "PgBouncer (version unknown)".to_owned(),
    }
}

/// `SELECT VERSION()`.
pub async fn mariadb(url: &str) -> String {
    use mysql_async::prelude::Queryable;
    let asked = async {
        let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(url)?)
            .prefer_socket(false);
        let mut conn = mysql_async::Conn::new(opts).await?;
        let version: Option<String> = conn.query_first("SELECT VERSION()").await?;
        let _ = conn.disconnect().await;
        Ok::<_, crate::Error>(version.unwrap_or_default())
    };
    match asked.await {
        // "10.11.6-MariaDB-0+deb12u1": the version and the server's name.
        Ok(v) => match v.split_once("-MariaDB") {
            Some((number, _)) => format!("MariaDB {number}"),
            None => format!("MySQL {v}"),
        },
        Err(e) => format!("unknown ({e})"),
    }
}

/// The four-letter `srvr`: "Zookeeper version: 3.8.0-…, built on …".
pub fn zookeeper(port: u16) -> String {
    support::zookeeper::four_letter(port, "srvr")
        .and_then(|reply| {
            let line = reply
                .lines()
                .find_map(|l| l.strip_prefix("Zookeeper version:"))?;
            let version = line.trim().split([',', '-']).next()?.trim().to_owned();
            Some(format!("ZooKeeper {version}"))
        })
        .unwrap_or_else(|| "unknown (no answer to srvr)".to_owned())
}

/// etcd's `/version`: `{"etcdserver":"3.4.30","etcdcluster":"3.4.0"}`.
pub fn etcd(port: u16) -> String {
    support::etcd::http_call(port, "GET", "/version", "")
        .and_then(|body| {
            let rest = body.split_once("\"etcdserver\":\"")?.1;
            Some(format!("etcd {}", rest.split('"').next()?))
        })
        .unwrap_or_else(|| "unknown (no answer at /version)".to_owned())
}

/// The version in the NATS server's `INFO` (async-nats's `server_info`): "NATS 2.15.1".
pub fn nats(client: &async_nats::Client) -> String {
    match client.server_info().version {
        version if version.is_empty() => "unknown (no version in INFO)".to_owned(),
        version => format!("NATS {version}"),
    }
}
