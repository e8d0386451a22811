//! Rows 14 and 15: Redlock over three independent `redis-server`s, and a Redis Cluster of
//! three masters, each of the bench's own: uncontended lock + release (fresh keys, one reused
//! key) and 64-task throughput on distinct keys, interleaved with the raw floor (the rows of
//! [`sql::against`]).
//!
//! - Redlock's floor: `SET NX PX` on each of the three nodes at once, every answer awaited,
//!   then the compare-and-delete `EVALSHA` on each at once — the algorithm's commands with no
//!   vote counting, validity arithmetic or bookkeeping — on one multiplexed redis-rs connection
//!   per node, as distlock keeps.
//! - Cluster's floor: `SET NX PX` + compare-and-delete `EVALSHA` through redis-rs's cluster
//!   connection (which routes by key), on `{lock:K}:raw` — the slot of distlock's own key for
//!   `K`, `{lock:K}`, so both sides spread over the same masters in the same way.

use distlock::LockClient;
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use support::RedisServer;
use support::cluster::RedisCluster;

use crate::record::{At, Base, Better, at, count};
use crate::sql::{self, Peer, RawPair};
use crate::{Error, RAW_RELEASE, Report, versions};

const TOKEN: &str = "t0123456789abcdef0123456789abcdef";

/// Redlock's raw floor on three nodes.
#[derive(Clone)]
struct RedlockRaw {
    nodes: Vec<MultiplexedConnection>,
    release: redis::Script,
}

impl RawPair for RedlockRaw {
    async fn pair(&self, _conn: usize, key: &str, _fresh: bool) -> Result<(), Error> {
        let set = |mut conn: MultiplexedConnection| async move {
            redis::cmd("SET")
                .arg(key)
                .arg(TOKEN)
                .arg("NX")
                .arg("PX")
                .arg(30_000)
                .query_async::<Option<String>>(&mut conn)
                .await
        };
        let [a, b, c] = [0, 1, 2].map(|i| self.nodes[i].clone());
        let (a, b, c) = tokio::join!(set(a), set(b), set(c));
        for granted in [a?, b?, c?] {
            assert!(granted.is_some(), "raw Redlock key {key} was taken");
        }
        let release = |mut conn: MultiplexedConnection| async move {
            self.release
                .key(key)
                .arg(TOKEN)
                .invoke_async::<i64>(&mut conn)
                .await
        };
        let [a, b, c] = [0, 1, 2].map(|i| self.nodes[i].clone());
        let (a, b, c) = tokio::join!(release(a), release(b), release(c));
        for released in [a?, b?, c?] {
            assert_eq!(released, 1, "raw Redlock key {key} was not ours");
        }
        Ok(())
    }
}

/// Row 14: Redlock (`redlock://`) over three `redis-server`s.
pub async fn redlock_rows(report: &mut Report) -> Result<(), Error> {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let version = versions::redis(&servers[0]).await;
    report.server("redlock", format!("{version} (3 servers)"));
    let nodes: Vec<String> = servers
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port()))
        .collect();
    let client = LockClient::connect(&format!("redlock://{}", nodes.join(","))).await?;
    let release = redis::Script::new(RAW_RELEASE);
    let mut conns = Vec::new();
    for server in &servers {
        let mut conn = redis::Client::open(server.url())?
            .get_multiplexed_async_connection()
            .await?;
        release.load_async(&mut conn).await?;
        conns.push(conn);
    }
    let raw = RedlockRaw {
        nodes: conns,
        release,
    };
    let row14 = at("redlock", "14");
    let raw_name = "raw `SET NX PX` on the 3 nodes at once, then compare-and-delete `EVALSHA` \
                    on the 3 at once";
    sql::warm_and_against(report, row14, "redlock", &client, &raw, raw_name).await?;
    let servers: Vec<&RedisServer> = servers.iter().collect();
    commands_row(report, row14, "redlock", &servers, &client, &raw, raw_name).await
}

/// The commands the servers ran per lock + release, summed over `servers`, for distlock
/// (`client`) and the raw floor (`raw`): 200 pairs on fresh keys each.
async fn commands_row(
    report: &mut Report,
    at: At<'_>,
    key: &str,
    servers: &[&RedisServer],
    client: &LockClient,
    raw: &impl RawPair,
    raw_name: &str,
) -> Result<(), Error> {
    // Every command but the count's own (and a cluster client's topology checks).
    async fn total(servers: &[&RedisServer]) -> u64 {
        let mut sum = 0;
        for server in servers {
            let stats = crate::contention::command_stats(server).await;
            sum += stats
                .iter()
                .filter(|(name, _)| {
                    !matches!(name.as_str(), "info" | "config" | "cluster" | "ping")
                })
                .map(|(_, calls)| calls)
                .sum::<u64>();
        }
        sum
    }
    let calls = 200u64;
    let mut per_pair = [0f64; 2];
    for (i, side) in [&sql::Ours(client) as &dyn Counted, raw as &dyn Counted]
        .into_iter()
        .enumerate()
    {
        let before = total(servers).await;
        side.run(&format!("count:{i}:"), calls).await?;
        per_pair[i] = (total(servers).await - before) as f64 / calls as f64;
    }
    let [ours, theirs] = per_pair.map(|n| count(n, "commands"));
    report.row(
        at,
        format!("{key}_commands"),
        "server commands per lock + release, all nodes together (`INFO commandstats`)",
        ours,
        Base::quotient(raw_name, ours, theirs),
        Better::Lower,
    );
    report.field(&format!("{key}_commands_per_pair"), ours.value);
    report.field(&format!("{key}_raw_commands_per_pair"), theirs.value);
    Ok(())
}

/// One side of [`commands_row`]: `calls` pairs one after another on fresh keys.
trait Counted {
    fn run<'a>(
        &'a self,
        prefix: &'a str,
        calls: u64,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<f64, Error>> + 'a>>;
}

impl<P: Peer> Counted for P {
    fn run<'a>(
        &'a self,
        prefix: &'a str,
        calls: u64,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<f64, Error>> + 'a>> {
        Box::pin(self.sequential(prefix, calls, false))
    }
}

/// Redis Cluster's raw floor through redis-rs's cluster connection.
#[derive(Clone)]
struct ClusterRaw {
    conn: ClusterConnection,
    release: redis::Script,
}

impl RawPair for ClusterRaw {
    async fn pair(&self, _conn: usize, key: &str, _fresh: bool) -> Result<(), Error> {
        let key = format!("{{lock:{key}}}:raw");
        let mut conn = self.conn.clone();
        let granted: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(TOKEN)
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query_async(&mut conn)
            .await?;
        assert!(granted.is_some(), "raw cluster key {key} was taken");
        let released: i64 = self
            .release
            .key(&key)
            .arg(TOKEN)
            .invoke_async(&mut conn)
            .await?;
        assert_eq!(released, 1, "raw cluster key {key} was not ours");
        Ok(())
    }
}

/// Row 15: Redis Cluster (`redis+cluster://`), three masters, no replicas.
pub async fn cluster_rows(report: &mut Report) -> Result<(), Error> {
    let cluster = RedisCluster::start(3, 0);
    let version = versions::redis(&cluster.nodes[0]).await;
    report.server("cluster", format!("{version} (3 masters)"));
    let client = LockClient::connect(&cluster.url()).await?;
    let raw = ClusterRaw {
        conn: cluster.connection().await,
        release: redis::Script::new(RAW_RELEASE),
    };
    let row15 = at("cluster", "15");
    let raw_name = "raw `SET NX PX` + compare-and-delete `EVALSHA` through redis-rs's cluster \
                    connection, same slots";
    sql::warm_and_against(report, row15, "cluster", &client, &raw, raw_name).await?;
    let nodes: Vec<&RedisServer> = cluster.nodes.iter().collect();
    commands_row(report, row15, "cluster", &nodes, &client, &raw, raw_name).await
}
