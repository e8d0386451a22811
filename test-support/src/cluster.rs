//! A real Redis Cluster of `redis-server` processes, created with `redis-cli --cluster create`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redis::Value;

use super::{RedisServer, TEST_COMMAND, unique};

/// Masters (and replicas) on free loopback ports, each with its own directory for
/// `nodes.conf`. Every process is killed when this is dropped.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    /// TLS between clients and nodes and on the cluster bus (`tls-cluster yes`).
    tls: bool,
}

impl RedisCluster {
    /// `masters` masters with `replicas` replicas each; returns once every node reports the
    /// cluster ok with all 16384 slots covered.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        RedisCluster::start_with(masters, replicas, false)
    }

    /// A cluster that speaks TLS only, to clients and between its nodes, with the process's
    /// test certificates (`rediss+cluster://…?cacert=`); the test looks through each node's
    /// Unix socket.
    pub fn start_tls(masters: usize, replicas: usize) -> RedisCluster {
        RedisCluster::start_with(masters, replicas, true)
    }

    fn start_with(masters: usize, replicas: usize, tls: bool) -> RedisCluster {
        let count = masters * (1 + replicas);
        let nodes: Vec<RedisServer> = (0..count)
            .map(|_| {
                let dir = std::env::temp_dir().join(unique("distlock-cluster"));
                std::fs::create_dir_all(&dir).expect("node directory");
                let mut args = vec![
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "1000",
                    // Replicas sync at once (the default waits 5 s for more replicas), so a
                    // replica is ready to take over as soon as the cluster is up.
                    "--repl-diskless-sync-delay",
                    "0",
                    "--dir",
                    dir.to_str().expect("utf-8 temp dir"),
                ];
                let mut node = match tls {
                    false => RedisServer::start_with(&args),
                    true => {
                        args.extend([
                            "--tls-auth-clients",
                            "optional",
                            "--tls-cluster",
                            "yes",
                            "--tls-replication",
                            "yes",
                        ]);
                        RedisServer::start_tls_with(&args)
                    }
                };
                node.data_dir = Some(dir);
                node
            })
            .collect();
        let mut create = Command::new("redis-cli");
        if tls {
            create
                .arg("--tls")
                .arg("--cacert")
                .arg(&crate::certs::Certificates::shared().ca);
        }
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null());
        let output = match super::output_tied(create) {
            Ok(output) => output,
            Err(error) => panic!(
                "redis-cli is not installed ({error}). Run the README's test command, \
                 `{TEST_COMMAND}`, which installs redis-server and redis-cli"
            ),
        };
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = RedisCluster { nodes, tls };
        for i in 0..count {
            cluster.wait_until_ok(i, Duration::from_secs(20));
        }
        // A replica that never synced cannot take over: wait for every replication link.
        let deadline = Instant::now() + Duration::from_secs(20);
        for i in 0..count {
            loop {
                let info: String = cluster.query(i, redis::cmd("INFO").arg("replication"));
                if info.contains("role:master") || info.contains("master_link_status:up") {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "replica {i} never synced:\n{info}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // And every node's view has every replica (gossip converged): a client that asks any
        // node which replicas each master has gets the whole answer.
        for i in 0..count {
            loop {
                let nodes: String = cluster.query(i, redis::cmd("CLUSTER").arg("NODES"));
                let replicas_seen = nodes
                    .lines()
                    .filter(|l| l.split(' ').nth(2).is_some_and(|f| f.contains("slave")))
                    .count();
                if replicas_seen == masters * replicas {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "node {i} does not see {} replicas:\n{nodes}",
                    masters * replicas
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        cluster
    }

    /// `redis+cluster://` with every node as a seed.
    pub fn url(&self) -> String {
        RedisCluster::url_with_ports(self.nodes.iter().map(RedisServer::port), self.tls)
    }

    /// `redis+cluster://` (`rediss+cluster://…?cacert=` with TLS) with these ports as seeds.
    pub fn url_with_ports(ports: impl Iterator<Item = u16>, tls: bool) -> String {
        let nodes: Vec<String> = ports.map(|port| format!("127.0.0.1:{port}")).collect();
        match tls {
            false => format!("redis+cluster://{}", nodes.join(",")),
            true => format!(
                "rediss+cluster://{}?cacert={}",
                nodes.join(","),
                crate::certs::Certificates::shared().ca.display()
            ),
        }
    }

    /// Whether the cluster speaks TLS.
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// Makes node `i` announce `ports[i]` as its client port (`cluster-announce-port`: a proxy
    /// in front of it) and waits until every node's `CLUSTER SLOTS` shows only those ports.
    pub fn announce_ports(&self, ports: &[u16]) {
        for (i, port) in ports.iter().enumerate() {
            let _: () = self.query(
                i,
                redis::cmd("CONFIG")
                    .arg("SET")
                    .arg("cluster-announce-port")
                    .arg(port),
            );
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for i in 0..self.nodes.len() {
            loop {
                let slots: Vec<Value> = self.query(i, redis::cmd("CLUSTER").arg("SLOTS"));
                let shown = format!("{slots:?}");
                let stale = self
                    .nodes
                    .iter()
                    .any(|node| shown.contains(&format!("int({})", node.port())));
                if !stale {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "node {i} still announces the real ports: {shown}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// A cluster connection of the test's own (follows redirections).
    pub async fn connection(&self) -> redis::cluster_async::ClusterConnection {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| n.url().split('?').next().unwrap_or_default().to_owned())
            .collect();
        let mut builder = redis::cluster::ClusterClient::builder(seeds);
        if self.tls {
            // rustls needs a provider chosen when two are compiled in.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let ca = std::fs::read(&crate::certs::Certificates::shared().ca).expect("the test CA");
            builder = builder.certs(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca),
            });
        }
        builder
            .build()
            .expect("cluster client")
            .get_async_connection()
            .await
            .expect("the test's own cluster connection")
    }

    /// The string value at `key`, read through the cluster.
    pub async fn get(&self, key: &str) -> Option<String> {
        let mut conn = self.connection().await;
        redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("GET")
    }

    /// Runs `command` on node `i` with a plain connection of its own.
    pub fn query<T: redis::FromRedisValue>(&self, i: usize, command: &redis::Cmd) -> T {
        let mut conn = redis::Client::open(self.nodes[i].local_url())
            .expect("node url")
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("connection to a cluster node");
        command.query(&mut conn).expect("command on a cluster node")
    }

    /// The index of the node that serves `slot` now, asked of node `via` (`CLUSTER SLOTS`).
    pub fn owner_of(&self, slot: u16, via: usize) -> usize {
        let ranges: Vec<Value> = self.query(via, &redis::cmd("CLUSTER").arg("SLOTS").clone());
        for range in ranges {
            let Value::Array(fields) = range else {
                continue;
            };
            let start: u16 = redis::from_redis_value_ref(&fields[0]).expect("slot range start");
            let end: u16 = redis::from_redis_value_ref(&fields[1]).expect("slot range end");
            if (start..=end).contains(&slot) {
                let Value::Array(master) = &fields[2] else {
                    panic!("unexpected CLUSTER SLOTS entry")
                };
                let port: u16 = redis::from_redis_value_ref(&master[1]).expect("master port");
                return self.index_of(port);
            }
        }
        panic!("slot {slot} is not served by any node")
    }

    pub fn index_of(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    /// The slot of `key`, as the server computes it.
    pub fn slot(&self, key: &str, via: usize) -> u16 {
        self.query(via, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
    }

    pub fn is_master(&self, i: usize) -> bool {
        let role: Vec<Value> = self.query(i, &redis::cmd("ROLE"));
        matches!(role.first(), Some(Value::BulkString(r)) if r == b"master")
    }

    pub fn node_id(&self, i: usize) -> String {
        self.query(i, redis::cmd("CLUSTER").arg("MYID"))
    }

    /// Waits until node `i` says the cluster is ok and every slot is served.
    pub fn wait_until_ok(&self, i: usize, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let info: String = self.query(i, redis::cmd("CLUSTER").arg("INFO"));
            if info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "cluster not ok on node {i} within {within:?}:\n{info}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until node `via` sees `slot` served by a node other than `failed` (a replica
    /// promoted) and the cluster ok again.
    pub fn wait_for_failover(&self, slot: u16, failed: usize, via: usize, within: Duration) {
        let deadline = Instant::now() + within;
        while self.owner_of(slot, via) == failed {
            assert!(
                Instant::now() < deadline,
                "no replica took over slot {slot} within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.wait_until_ok(via, deadline.saturating_duration_since(Instant::now()));
    }

    /// Moves `slot` from node `from` to node `to` the way `redis-cli --cluster reshard` does:
    /// IMPORTING/MIGRATING, then `before_keys` runs while the slot is half-moved (clients get
    /// `ASK` for keys not on the source any more), then the keys move and the slot is assigned.
    pub async fn migrate_slot<F, Fut>(&self, slot: u16, from: usize, to: usize, before_keys: F)
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let setslot = |node: usize, state: &str, id: &str| {
            let () = self.query(
                node,
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg(state)
                    .arg(id),
            );
        };
        setslot(to, "IMPORTING", &from_id);
        setslot(from, "MIGRATING", &to_id);
        before_keys().await;
        loop {
            let keys: Vec<String> = self.query(
                from,
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(100),
            );
            if keys.is_empty() {
                break;
            }
            let () = self.query(
                from,
                redis::cmd("MIGRATE")
                    .arg("127.0.0.1")
                    .arg(self.nodes[to].port())
                    .arg("")
                    .arg(0)
                    .arg(5000)
                    .arg("KEYS")
                    .arg(&keys),
            );
        }
        for node in 0..self.nodes.len() {
            if self.nodes[node].is_running() && self.is_master(node) {
                let () = self.query(
                    node,
                    redis::cmd("CLUSTER")
                        .arg("SETSLOT")
                        .arg(slot)
                        .arg("NODE")
                        .arg(&to_id),
                );
            }
        }
    }
}
