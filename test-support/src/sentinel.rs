//! A Redis Sentinel deployment of the test's own: a master, its replicas and the sentinels that
//! watch them (`redis-server <conf> --sentinel`, from the `redis-server` package), each on a
//! free loopback port; every process killed and every file removed when dropped.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{RedisServer, ServerChild, TEST_COMMAND, free_port, unique};

/// How long the sentinels wait before they call a silent master down. Short, so a failover
/// takes seconds; long enough that a busy machine's scheduling delays never look like a crash.
pub const DOWN_AFTER: Duration = Duration::from_millis(1_500);

/// One sentinel process and its (rewritable) configuration file.
pub struct Sentinel {
    pub port: u16,
    /// A TLS sentinel's TLS port (clients under test use it; `port` is the harness's own).
    pub tls_port: Option<u16>,
    conf: PathBuf,
    child: ServerChild,
}

impl Sentinel {
    /// A sentinel (its files in `dir`) watching the master at `master` as `service`, calling it
    /// down after [`DOWN_AFTER`] when `quorum` sentinels agree.
    pub fn start_at(dir: &std::path::Path, service: &str, master: u16, quorum: usize) -> Sentinel {
        Sentinel::start_inner(dir, service, master, quorum, DOWN_AFTER, false)
    }

    /// A sentinel that never fails its master over during a test (down after ten minutes): it
    /// only tells clients where the master is.
    pub fn start_patient(dir: &std::path::Path, service: &str, master: u16) -> Sentinel {
        Sentinel::start_inner(dir, service, master, 1, Duration::from_secs(600), false)
    }

    fn start_inner(
        dir: &std::path::Path,
        service: &str,
        master: u16,
        quorum: usize,
        down_after: Duration,
        tls: bool,
    ) -> Sentinel {
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = free_port();
            let tls_port = tls.then(free_port);
            let conf = dir.join(format!("sentinel-{port}.conf"));
            // With TLS: a TLS port for clients, TLS to the master and replicas.
            let tls_lines = match tls_port {
                None => String::new(),
                Some(tls_port) => {
                    let certs = crate::certs::Certificates::shared();
                    format!(
                        "tls-port {tls_port}\ntls-cert-file {}\ntls-key-file {}\n\
                         tls-ca-cert-file {}\ntls-auth-clients optional\ntls-replication yes\n",
                        certs.server_cert.display(),
                        certs.server_key.display(),
                        certs.ca.display()
                    )
                }
            };
            std::fs::write(
                &conf,
                tls_lines
                    + &format!(
                        "port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n\
                     dir {dir}\nloglevel warning\nlogfile \"\"\n\
                     sentinel monitor {service} 127.0.0.1 {master} {quorum}\n\
                     sentinel down-after-milliseconds {service} {down}\n\
                     sentinel failover-timeout {service} 10000\n\
                     sentinel parallel-syncs {service} 2\n",
                        dir = dir.display(),
                        down = down_after.as_millis(),
                    ),
            )
            .expect("sentinel configuration");
            let mut command = Command::new(
                std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into()),
            );
            command
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let mut child = ServerChild::default();
            if let Err(error) = child.spawn(command, "redis-server --sentinel") {
                panic!(
                    "{error}: redis-server (which runs the sentinels) is not installed? Run the \
                     README's test command, `{TEST_COMMAND}`, which installs it"
                );
            }
            let ready = child.wait_ready(Duration::from_secs(10), || {
                query::<String>(port, &redis::cmd("PING")).is_ok_and(|p| p == "PONG")
            });
            match ready {
                Ok(()) => {
                    return Sentinel {
                        port,
                        tls_port,
                        conf,
                        child,
                    };
                }
                Err(()) => last_error = format!("the sentinel on port {port} did not start"),
            }
        }
        panic!("{last_error}");
    }

    pub fn kill(&mut self) {
        self.child.kill();
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.child.kill();
        let _ = std::fs::remove_file(&self.conf);
    }
}

/// A master, `replicas` replicas and `sentinels` sentinels watching them under one service name.
pub struct SentinelGroup {
    /// The data servers: `servers[0]` starts as the master.
    pub servers: Vec<RedisServer>,
    pub sentinels: Vec<Sentinel>,
    pub service: String,
    dir: PathBuf,
}

impl SentinelGroup {
    /// Starts the group and waits until every replica is in sync with the master. The sentinels
    /// answer at once; [`wait_until_watched`](Self::wait_until_watched) waits until they also
    /// know each other and every replica (what a failover needs).
    pub fn start(replicas: usize, sentinels: usize) -> SentinelGroup {
        SentinelGroup::start_with(replicas, sentinels, DOWN_AFTER)
    }

    /// [`start`](Self::start), the sentinels calling a silent master down after `down_after`.
    pub fn start_with(replicas: usize, sentinels: usize, down_after: Duration) -> SentinelGroup {
        SentinelGroup::start_inner(replicas, sentinels, down_after, false)
    }

    /// A group that speaks TLS only to clients (sentinels too: a TLS port each) and replicates
    /// over TLS, with the process's test certificates; [`url`](Self::url) is
    /// `rediss+sentinel://…?cacert=`.
    pub fn start_tls(replicas: usize, sentinels: usize) -> SentinelGroup {
        SentinelGroup::start_inner(replicas, sentinels, DOWN_AFTER, true)
    }

    fn start_inner(
        replicas: usize,
        sentinels: usize,
        down_after: Duration,
        tls: bool,
    ) -> SentinelGroup {
        let dir = std::env::temp_dir().join(unique("distlock-sentinel"));
        std::fs::create_dir_all(&dir).expect("sentinel directory");
        // Every server may become the master: no diskless-sync delay on any.
        let common = [
            "--repl-diskless-sync-delay",
            "0",
            "--repl-ping-replica-period",
            "1",
        ];
        let start = |args: &[&str]| match tls {
            false => RedisServer::start_with(args),
            true => {
                let mut args = args.to_vec();
                args.extend(["--tls-auth-clients", "optional", "--tls-replication", "yes"]);
                RedisServer::start_tls_with(&args)
            }
        };
        let master = start(&common);
        let master_port = master.port().to_string();
        let mut servers = vec![master];
        for _ in 0..replicas {
            let mut args = common.to_vec();
            args.extend(["--replicaof", "127.0.0.1", master_port.as_str()]);
            servers.push(start(&args));
        }
        let service = unique("svc").replace('-', "_");
        let quorum = sentinels / 2 + 1;
        let sentinels = (0..sentinels)
            .map(|_| {
                Sentinel::start_inner(&dir, &service, servers[0].port(), quorum, down_after, tls)
            })
            .collect();
        let group = SentinelGroup {
            servers,
            sentinels,
            service,
            dir,
        };
        group.wait_for_replicas(0, replicas, Duration::from_secs(20));
        group
    }

    /// A directory of the group's own (removed with it).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// `redis+sentinel://127.0.0.1:<s1>,…/<service>` followed by `options` (`?replicas=1`).
    /// For a TLS group: `rediss+sentinel://` to the sentinels' TLS ports, the test CA named
    /// after `options` (which must then start with `?`, or be empty).
    pub fn url(&self, options: &str) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.tls_port.unwrap_or(s.port)))
            .collect();
        let tls = self.sentinels.first().is_some_and(|s| s.tls_port.is_some());
        if !tls {
            return format!(
                "redis+sentinel://{}/{}{options}",
                hosts.join(","),
                self.service
            );
        }
        let join = if options.is_empty() { '?' } else { '&' };
        format!(
            "rediss+sentinel://{}/{}{options}{join}cacert={}",
            hosts.join(","),
            self.service,
            crate::certs::Certificates::shared().ca.display()
        )
    }

    /// The index of the server the sentinels name as the master now (the first sentinel that
    /// answers), if any.
    pub fn named_master(&self) -> Option<usize> {
        for sentinel in &self.sentinels {
            let named: redis::RedisResult<Option<(String, u16)>> = query(
                sentinel.port,
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.service),
            );
            if let Ok(Some((_, port))) = named {
                return self.servers.iter().position(|s| s.port() == port);
            }
        }
        None
    }

    /// Waits until the sentinels know every replica and each other.
    pub fn wait_until_watched(&self, within: Duration) {
        let replicas = self.servers.iter().filter(|s| s.is_running()).count() - 1;
        let others = self.sentinels.len() - 1;
        let deadline = Instant::now() + within;
        for sentinel in &self.sentinels {
            loop {
                let known = |what: &str| {
                    query::<Vec<redis::Value>>(
                        sentinel.port,
                        redis::cmd("SENTINEL").arg(what).arg(&self.service),
                    )
                    .map_or(0, |v| v.len())
                };
                if known("replicas") >= replicas && known("sentinels") >= others {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "sentinel {} did not learn of {replicas} replicas and {others} other \
                     sentinels within {within:?}",
                    sentinel.port
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Kills (SIGKILL) the server the sentinels name as the master; its index.
    pub fn kill_master(&mut self) -> usize {
        let master = self.named_master().expect("the sentinels name a master");
        self.servers[master].kill();
        master
    }

    /// Waits until the sentinels name a master other than `old` and it says it is one; its
    /// index.
    pub fn wait_for_failover(&self, old: usize, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            if let Some(new) = self.named_master().filter(|&m| m != old)
                && self.role(new).as_deref() == Some("master")
            {
                return new;
            }
            assert!(
                Instant::now() < deadline,
                "the sentinels did not promote a replica within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `ROLE`'s first word for server `i` (`master`, `slave`), if it answers.
    pub fn role(&self, i: usize) -> Option<String> {
        if !self.servers[i].is_running() {
            return None;
        }
        let role: Vec<redis::Value> =
            query_url(&self.servers[i].local_url(), &redis::cmd("ROLE")).ok()?;
        match role.first() {
            Some(redis::Value::BulkString(word)) => Some(String::from_utf8_lossy(word).into()),
            _ => None,
        }
    }

    /// Waits until master `i` has `count` replicas online.
    pub fn wait_for_replicas(&self, i: usize, count: usize, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let info: String = query_url(
                &self.servers[i].local_url(),
                redis::cmd("INFO").arg("replication"),
            )
            .unwrap_or_default();
            let online = info
                .lines()
                .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                .count();
            if online >= count {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{count} replicas did not come online at server {i} within {within:?}: {info}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Restarts killed server `i` (empty: persistence is off); the sentinels turn it into a
    /// replica of the current master.
    pub fn restart(&mut self, i: usize) {
        self.servers[i].restart();
    }

    /// A connection to the current master (as the sentinels name it).
    pub async fn master_connection(&self) -> redis::aio::MultiplexedConnection {
        let master = self.named_master().expect("the sentinels name a master");
        self.servers[master].connection().await
    }
}

impl Drop for SentinelGroup {
    fn drop(&mut self) {
        self.sentinels.clear();
        self.servers.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One command to `127.0.0.1:port` on a blocking connection of its own (1 s timeouts).
pub fn query<T: redis::FromRedisValue>(port: u16, command: &redis::Cmd) -> redis::RedisResult<T> {
    query_url(&format!("redis://127.0.0.1:{port}"), command)
}

/// One command to the server at `url` on a blocking connection of its own (1 s timeouts).
pub fn query_url<T: redis::FromRedisValue>(
    url: &str,
    command: &redis::Cmd,
) -> redis::RedisResult<T> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_connection_with_timeout(Duration::from_secs(1))?;
    conn.set_read_timeout(Some(Duration::from_secs(1)))?;
    command.query(&mut conn)
}
