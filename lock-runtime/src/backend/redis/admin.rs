//! The admin API on Redis: inspecting, listing (SCAN) and force-releasing locks, and `INFO`.
//! Off the hot path: scripts are sent with `EVALSHA`, falling back to `EVAL`.

use std::future::Future;
use std::sync::LazyLock;
use std::time::Duration;

use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{RedisError, RedisResult, Script, Value};

use super::RedisBackend;
use super::connection::Connection;
use super::scripts::{FORCE_RELEASE, FORCE_RELEASE_IF, INSPECT};
use crate::admin::{Entry, Listing};
use crate::error::BoxError;

/// How many keys one `SCAN` step asks a node to look at.
const SCAN_COUNT: usize = 1000;

/// The reply of [`INSPECT`] / [`FORCE_RELEASE`].
type Found = Option<(
    Option<String>,
    i64,
    Option<String>,
    i64,
    Vec<(String, i64)>,
    u32,
)>;

impl RedisBackend {
    /// Runs `script` (one of the admin scripts) on lock `name`, with `tokens` as its ARGV.
    async fn admin_script(
        &self,
        script: &Script,
        name: &str,
        tokens: &[String],
    ) -> Result<Option<Entry>, BoxError> {
        let fence_key = self.fence_key(name);
        let (queue, _) = self.fair_keys(name);
        let writers = self.writers_key(name);
        let found: Found = self
            .run(|mut conn, _| {
                let mut call = script.key(name);
                call.key(&fence_key).key(&queue).key(&writers);
                for token in tokens {
                    call.arg(token.as_str());
                }
                async move { call.invoke_async(&mut conn).await }
            })
            .await?;
        Ok(
            found.and_then(|(value, pttl, fence, waiting, readers, permits)| {
                if value.is_none() && readers.is_empty() {
                    return None;
                }
                Some(Entry {
                    name: name.to_owned(),
                    token: value,
                    holder: None,
                    ttl: (pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
                    fencing_token: fence.and_then(|f| f.parse().ok()),
                    waiters: (waiting > 0).then_some(waiting as u64),
                    readers: readers
                        .into_iter()
                        .map(|(token, left)| {
                            (token, Some(Duration::from_millis(left.max(0) as u64)))
                        })
                        .collect(),
                    permits: (permits > 0).then(|| u16::try_from(permits).unwrap_or(u16::MAX)),
                })
            }),
        )
    }

    pub(crate) async fn inspect_lock(&self, name: &str) -> Result<Option<Entry>, BoxError> {
        static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(INSPECT));
        self.admin_script(&SCRIPT, name, &[]).await
    }

    pub(crate) async fn force_release_lock(&self, name: &str) -> Result<Option<Entry>, BoxError> {
        static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(FORCE_RELEASE));
        self.admin_script(&SCRIPT, name, &[]).await
    }

    /// A forced release of `name` only while one of `tokens` holds it (see
    /// [`FORCE_RELEASE_IF`]): the lock as it was read.
    pub(crate) async fn force_release_of(
        &self,
        name: &str,
        tokens: &[String],
    ) -> Result<Option<Entry>, BoxError> {
        static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(FORCE_RELEASE_IF));
        self.admin_script(&SCRIPT, name, tokens).await
    }

    /// The lock names matching `prefix` + `pattern` (SCAN on the server, or on every master of
    /// a cluster), then each inspected.
    pub(crate) async fn list_locks(&self, listing: Listing<'_>) -> Result<Vec<Entry>, BoxError> {
        let Listing {
            prefix,
            pattern,
            limit,
        } = listing;
        let mut glob = String::new();
        if self.is_cluster() {
            glob.push('{');
        }
        glob.push_str(&redis_glob(prefix, true));
        glob.push_str(&redis_glob(pattern, false));
        if self.is_cluster() {
            glob.push('}');
        }
        let (mut conn, _) = self.connection().await?;
        let nodes = if self.is_cluster() {
            masters(&mut conn).await?.into_iter().map(Some).collect()
        } else {
            vec![None]
        };
        let mut names: Vec<String> = Vec::new();
        // Every key matching the glob: plain locks are strings, readers' shares sorted sets
        // (the inspection script skips keys of any other type).
        'nodes: for node in nodes {
            let mut cursor = 0u64;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor)
                    .arg("MATCH")
                    .arg(&glob)
                    .arg("COUNT")
                    .arg(SCAN_COUNT);
                let answer: RedisResult<(u64, Vec<String>)> = match (&node, &mut conn) {
                    (Some((host, port)), Connection::Cluster(cluster)) => {
                        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                            host: host.clone(),
                            port: *port,
                        });
                        match cluster.route_command(scan, routing).await {
                            Ok(value) => redis::from_redis_value(value).map_err(RedisError::from),
                            Err(e) => Err(e),
                        }
                    }
                    _ => scan.query_async(&mut conn).await,
                };
                let (next, keys) = answer?;
                names.extend(keys);
                if names.len() >= limit {
                    break 'nodes;
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        names.sort();
        names.dedup();
        names.truncate(limit);
        inspect_each(&names, |name| self.inspect_lock(name)).await
    }

    /// `redis_version` (and `redis_mode` when not standalone) from `INFO server` (which a
    /// cluster connection sends to every master: one answer per node).
    pub(crate) async fn version(&self) -> Result<String, BoxError> {
        let info: Value = self
            .run(|mut conn, _| async move {
                redis::cmd("INFO")
                    .arg("server")
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        let answers: Vec<String> = match info {
            Value::Map(nodes) => nodes
                .into_iter()
                .filter_map(|(_, info)| redis::from_redis_value(info).ok())
                .collect(),
            info => vec![redis::from_redis_value(info)?],
        };
        let field = |info: &str, name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        // Valkey answers `redis_version:7.2.4` (the Redis it forked) and names itself in
        // `server_name` and `valkey_version`.
        let mut versions: Vec<String> = answers
            .iter()
            .map(|info| match field(info, "valkey_version") {
                Some(valkey) => format!("Valkey {valkey}"),
                None => format!(
                    "Redis {}",
                    field(info, "redis_version").unwrap_or_else(|| "unknown".to_owned())
                ),
            })
            .collect();
        versions.sort();
        versions.dedup();
        let version = versions.join("/");
        let mode = answers.first().and_then(|info| field(info, "redis_mode"));
        Ok(match mode {
            Some(mode) if mode != "standalone" && answers.len() > 1 => {
                format!("{version} ({mode}, {} nodes answered)", answers.len())
            }
            Some(mode) if mode != "standalone" => format!("{version} ({mode})"),
            _ => version,
        })
    }
}

/// Each of `names` inspected by `inspect`, all at once: the locks found, in the order of
/// `names`, or the first error.
pub(super) async fn inspect_each<'a, Fut>(
    names: &'a [String],
    inspect: impl FnMut(&'a String) -> Fut,
) -> Result<Vec<Entry>, BoxError>
where
    Fut: Future<Output = Result<Option<Entry>, BoxError>>,
{
    let found = futures_util::future::join_all(names.iter().map(inspect)).await;
    let mut entries = Vec::with_capacity(found.len());
    for entry in found {
        entries.extend(entry?);
    }
    Ok(entries)
}

/// How often the tracking connection of a change feed is pinged: a server gone without closing
/// the connection ends the feed within about this time.
const FEED_PING: Duration = Duration::from_secs(10);

impl RedisBackend {
    /// Changes under `prefix`: see [`track`]. On a single server, on every node of a cluster
    /// (a replica announces what replication writes), or on the master the sentinels name now
    /// (after a failover the feed ends, and the watch asks again).
    pub(crate) async fn change_feed(
        &self,
        prefix: &str,
    ) -> Result<Option<crate::admin::ChangeFeed>, BoxError> {
        let servers = self.servers().await?;
        // A cluster's lock names are hash tags: `{lock:K}`.
        let prefix = match self.link {
            super::Link::Cluster(_) => format!("{{{prefix}"),
            _ => prefix.to_owned(),
        };
        Ok(Some(track(&servers, &self.config, &prefix).await?))
    }

    /// A client of each server that holds this backend's keys.
    pub(crate) async fn servers(&self) -> RedisResult<Vec<redis::Client>> {
        Ok(match &self.link {
            super::Link::Single(client) => vec![client.clone()],
            super::Link::Cluster(_) => self.pubsub_nodes.clone(),
            super::Link::Sentinel(sentinels) => {
                let connect = sentinels.connect_master(&self.config, self.settings.connect_timeout);
                vec![connect.await?.0]
            }
        })
    }
}

/// Changes under `prefix` on each of `servers`: a RESP3 connection to each with
/// `CLIENT TRACKING ON BCAST PREFIX prefix`, on which the server pushes an `invalidate` message
/// naming each key under the prefix that is written, deleted or expires (Redis 6+). The feed
/// ends when any of the connections does.
pub(crate) async fn track(
    servers: &[redis::Client],
    config: &redis::AsyncConnectionConfig,
    prefix: &str,
) -> Result<crate::admin::ChangeFeed, BoxError> {
    let (pushes_to, mut pushes) = tokio::sync::mpsc::unbounded_channel();
    let config = config.clone().set_push_sender(pushes_to);
    let mut connections = Vec::with_capacity(servers.len());
    for server in servers {
        let info = server.get_connection_info().clone();
        let protocol = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let client = redis::Client::open(info.set_redis_settings(protocol))?;
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let mut tracking = redis::cmd("CLIENT");
        tracking.arg("TRACKING").arg("ON").arg("BCAST");
        if !prefix.is_empty() {
            tracking.arg("PREFIX").arg(prefix);
        }
        tracking.query_async::<()>(&mut conn).await?;
        connections.push(conn);
    }
    Ok(crate::admin::ChangeFeed::spawn(move |changed| async move {
        let mut ping = tokio::time::interval(FEED_PING);
        ping.tick().await;
        loop {
            tokio::select! {
                push = pushes.recv() => match push.map(|p| p.kind) {
                    Some(redis::PushKind::Invalidate) => {
                        changed.send_replace(());
                    }
                    Some(redis::PushKind::Disconnection) | None => return,
                    Some(_) => {}
                },
                _ = ping.tick() => {
                    for conn in &mut connections {
                        let pong = redis::cmd("PING").query_async::<()>(conn).await;
                        if pong.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    }))
}

/// `text` as a Redis `MATCH` glob: as is (`*`, `?`, `\`) but with `[` and `]` literal — or,
/// for a `literal` text (the key prefix), with every special character escaped.
fn redis_glob(text: &str, literal: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let special = if literal {
            matches!(c, '*' | '?' | '[' | ']' | '\\')
        } else {
            matches!(c, '[' | ']')
        };
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The masters of the cluster behind `conn`, from `CLUSTER NODES`: (host, port).
async fn masters(conn: &mut Connection) -> RedisResult<Vec<(String, u16)>> {
    let nodes: Value = redis::cmd("CLUSTER").arg("NODES").query_async(conn).await?;
    let nodes: String = redis::from_redis_value(nodes)?;
    Ok(nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let address = fields.nth(1)?;
            let flags = fields.next()?;
            if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
                return None;
            }
            let address = address.split(['@', ',']).next()?;
            let (host, port) = address.rsplit_once(':')?;
            Some((host.to_owned(), port.parse().ok()?))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_for_match() {
        assert_eq!(redis_glob("lock:*[x]", true), "lock:\\*\\[x\\]");
        assert_eq!(redis_glob("order:*[x]", false), "order:*\\[x\\]");
    }
}
