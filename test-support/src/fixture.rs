//! One backend under test, with the means to look at and tamper with what it holds — what a
//! human would do with `redis-cli` — so the conformance suite can assert on server state.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use distlock::{Feature, LockClient, LockClientBuilder};

use super::cluster::RedisCluster;
use super::mysql::MysqlServer;
use super::pgbouncer::PgBouncer;
use super::postgres::PostgresServer;
use super::proxy::DelayProxy;
use super::sentinel::{Sentinel, SentinelGroup};
use super::{RedisServer, unique};

/// A backend the conformance suite runs against.
#[allow(async_fn_in_trait)]
#[async_trait::async_trait(?Send)]
pub trait Fixture {
    /// The URL clients connect to.
    fn url(&self) -> String;

    /// A builder for a client of this backend (tests adjust leases, fencing, …).
    fn builder(&self) -> LockClientBuilder {
        LockClient::builder(self.url())
    }

    /// A client with default settings.
    async fn client(&self) -> LockClient {
        self.builder().build().await.expect("client connects")
    }

    /// Whether the store serves `feature`, as its client says (`LockClient::supports`: the
    /// store's capabilities, the one truth the docs' table is rendered from). A case for a
    /// feature the store lacks asserts its typed refusal instead.
    async fn supports(&self, feature: Feature) -> bool {
        self.client().await.supports(feature)
    }

    /// The owner token stored under backend key `name` (prefix included), if any.
    async fn holder(&self, name: &str) -> Option<String>;

    /// The remaining TTL of backend key `name`.
    async fn ttl(&self, name: &str) -> Option<Duration>;

    /// Deletes backend key `name` behind its holder's back.
    async fn delete(&self, name: &str);

    /// Replaces backend key `name` with another owner's token.
    async fn overwrite(&self, name: &str, token: &str, ttl: Duration);

    /// A URL to this backend whose every reply comes `min..=max` late (through delay proxies;
    /// a simulated latency on `memory://`, where no network exists), slow while the returned
    /// value lives.
    async fn slowed(&self, min: Duration, max: Duration) -> Slowed;

    /// Whether fencing tokens count acquisitions one by one (a counter), rather than only
    /// increase (ZooKeeper's transaction ids).
    fn fencing_consecutive(&self) -> bool {
        true
    }

    /// Why the backend's clients cannot be told apart by process — `None` when a lock can be
    /// shared across processes (every backend with a server; `memory://` lives in one).
    fn one_process(&self) -> Option<&'static str> {
        None
    }

    /// The live readers of backend key `name` as the store holds them: each one's token and
    /// remaining share (longest first) where the store keeps one per reader.
    async fn readers(&self, name: &str) -> Vec<(String, Option<Duration>)> {
        panic!("no read locks on this backend: nothing to read at {name}")
    }

    /// The live permits of the semaphore at backend key `name` as the store holds them: each
    /// one's token and remaining lease where the store keeps one per permit. Where permits are
    /// stored as readers' shares are, the readers.
    async fn permits(&self, name: &str) -> Vec<(String, Option<Duration>)> {
        self.readers(name).await
    }

    /// Whether anything at all is stored at backend key `name` (on any node).
    async fn anything_at(&self, name: &str) -> bool {
        self.holder(name).await.is_some()
    }

    /// The TTL of the result shared for lock `name` (prefix included) as the server holds it;
    /// `None` when none is stored. Only for a store that keeps them, on a server.
    async fn shared_ttl(&self, name: &str) -> Option<Duration> {
        unimplemented!("no shared result of {name} can be read here")
    }
}

/// A server a fixture uses: the binary's shared one (each test in a namespace of its own), or
/// one of the test's own, which a fault scenario may pause, kill and restart.
pub enum Server<S: 'static> {
    Shared(&'static S),
    Own(S),
}

impl<S> std::ops::Deref for Server<S> {
    type Target = S;

    fn deref(&self) -> &S {
        match self {
            Server::Shared(server) => server,
            Server::Own(server) => server,
        }
    }
}

impl<S> Server<S> {
    /// The test's own server, to kill or restart (a shared one is never touched).
    pub fn own_mut(&mut self) -> &mut S {
        match self {
            Server::Own(server) => server,
            Server::Shared(_) => panic!("a fault hits only a server of the test's own"),
        }
    }
}

/// A slow path to a backend (see [`Fixture::slowed`]).
pub struct Slowed {
    pub url: String,
    /// The proxies (or the client that keeps a `memory://` store alive).
    _keep: Vec<Box<dyn std::any::Any + Send>>,
}

impl Slowed {
    /// The proxies on this path (none on `memory://`).
    pub fn proxies(&self) -> impl Iterator<Item = &DelayProxy> {
        self._keep.iter().filter_map(|kept| kept.downcast_ref())
    }
}

/// Delay proxies in front of `ports`, replies held back by `min..=max`.
async fn slow_proxies(ports: &[u16], min: Duration, max: Duration) -> Vec<DelayProxy> {
    let mut proxies = Vec::new();
    for &port in ports {
        let proxy = DelayProxy::start(port).await;
        proxy.set_delay_range(min, max);
        proxies.push(proxy);
    }
    proxies
}

/// `url` (any `…:<port>…`) through a delay proxy in front of `port`.
async fn slowed_through(url: &str, port: u16, min: Duration, max: Duration) -> Slowed {
    let proxies = slow_proxies(&[port], min, max).await;
    Slowed {
        url: through(url, port, proxies[0].port()),
        _keep: keep(proxies),
    }
}

/// `url` (`scheme://user:password@127.0.0.1:<port>/…`) through a delay proxy in front of `port`.
async fn slowed_url(url: &str, port: u16, min: Duration, max: Duration) -> Slowed {
    let proxies = slow_proxies(&[port], min, max).await;
    let url = url.replace(&format!(":{port}/"), &format!(":{}/", proxies[0].port()));
    Slowed {
        url,
        _keep: keep(proxies),
    }
}

fn keep(proxies: Vec<DelayProxy>) -> Vec<Box<dyn std::any::Any + Send>> {
    proxies
        .into_iter()
        .map(|p| Box::new(p) as Box<dyn std::any::Any + Send>)
        .collect()
}

/// `memory://<unique name>`: a store of this test's own.
pub struct MemoryFixture {
    url: String,
}

impl MemoryFixture {
    pub fn new() -> MemoryFixture {
        MemoryFixture {
            url: format!("memory://{}", unique("conformance")),
        }
    }
}

#[async_trait::async_trait(?Send)]
impl Fixture for MemoryFixture {
    fn one_process(&self) -> Option<&'static str> {
        Some("memory:// lives in one process")
    }

    fn url(&self) -> String {
        self.url.clone()
    }

    async fn holder(&self, name: &str) -> Option<String> {
        distlock::__private::testing::memory_peek(&self.url, name).map(|(token, _)| token)
    }

    async fn readers(&self, name: &str) -> Vec<(String, Option<Duration>)> {
        let readers = distlock::__private::testing::memory_readers(&self.url, name);
        readers.into_iter().map(|(t, d)| (t, Some(d))).collect()
    }

    async fn ttl(&self, name: &str) -> Option<Duration> {
        distlock::__private::testing::memory_peek(&self.url, name).map(|(_, ttl)| ttl)
    }

    async fn delete(&self, name: &str) {
        distlock::__private::testing::memory_force(&self.url, name, None);
    }

    async fn overwrite(&self, name: &str, token: &str, ttl: Duration) {
        distlock::__private::testing::memory_force(&self.url, name, Some((token, ttl)));
    }

    async fn slowed(&self, min: Duration, max: Duration) -> Slowed {
        // A store lives while a client uses it: keep one for as long as it is slow.
        let client = self.client().await;
        distlock::__private::testing::memory_latency(&self.url, Some((min, max)));
        Slowed {
            url: self.url.clone(),
            _keep: vec![Box::new(client)],
        }
    }
}

/// A `redis-server` of this test's own.
pub struct RedisFixture {
    pub server: RedisServer,
}

impl RedisFixture {
    pub fn new() -> RedisFixture {
        RedisFixture {
            server: RedisServer::start(),
        }
    }

    /// A server that speaks TLS only (`rediss://…?cacert=`); the fixture looks at what it
    /// holds through its Unix socket.
    pub fn tls() -> RedisFixture {
        RedisFixture {
            server: RedisServer::start_tls(),
        }
    }
}

/// `url` of a TLS server with its port swapped for `proxy`'s (a delay proxy forwards the TLS
/// bytes as they are).
fn through(url: &str, server: u16, proxy: u16) -> String {
    url.replace(&format!(":{server}"), &format!(":{proxy}"))
}

#[async_trait::async_trait(?Send)]
impl Fixture for RedisFixture {
    async fn shared_ttl(&self, name: &str) -> Option<Duration> {
        let key = format!("lock-share:{name}");
        ttl_with(&mut self.server.connection().await, &key).await
    }

    fn url(&self) -> String {
        self.server.url()
    }

    async fn holder(&self, name: &str) -> Option<String> {
        self.server.get(name).await
    }

    async fn readers(&self, name: &str) -> Vec<(String, Option<Duration>)> {
        readers_with(&mut self.server.connection().await, name).await
    }

    async fn ttl(&self, name: &str) -> Option<Duration> {
        ttl_with(&mut self.server.connection().await, name).await
    }

    async fn delete(&self, name: &str) {
        RedisFixture::delete_on(&self.server, name).await;
    }

    async fn overwrite(&self, name: &str, token: &str, ttl: Duration) {
        RedisFixture::overwrite_on(&self.server, name, token, ttl).await;
    }

    async fn slowed(&self, min: Duration, max: Duration) -> Slowed {
        let proxies = slow_proxies(&[self.server.port()], min, max).await;
        Slowed {
            url: through(&self.server.url(), self.server.port(), proxies[0].port()),
            _keep: keep(proxies),
        }
    }
}

impl RedisFixture {
    async fn delete_on(server: &RedisServer, name: &str) {
        delete_with(&mut server.connection().await, name).await;
    }

    async fn overwrite_on(server: &RedisServer, name: &str, token: &str, ttl: Duration) {
        overwrite_with(&mut server.connection().await, name, token, ttl).await;
    }
}

/// The readers' shares stored at `name` through `conn` — a sorted set of tokens scored by the
/// end of each one's lease in server milliseconds — that have not ended by the server's clock.
async fn readers_with(
    conn: &mut impl redis::aio::ConnectionLike,
    name: &str,
) -> Vec<(String, Option<Duration>)> {
    let kind: String = redis::cmd("TYPE")
        .arg(name)
        .query_async(conn)
        .await
        .expect("TYPE");
    if kind == "none" || kind == "string" {
        return Vec::new(); // free, or a writer's
    }
    assert_eq!(kind, "zset", "readers' shares at {name} are a sorted set");
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.expect("TIME");
    let now = secs * 1000 + micros / 1000;
    let shares: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(name)
        .arg(0)
        .arg(-1)
        .arg("REV")
        .arg("WITHSCORES")
        .query_async(conn)
        .await
        .expect("ZRANGE");
    shares
        .into_iter()
        .filter(|(_, ends)| *ends as u64 > now)
        .map(|(token, ends)| (token, Some(Duration::from_millis(ends as u64 - now))))
        .collect()
}

/// The live shares (not the writers' marks `!<token> …`) in a SQL readers' row's `holder`
/// column — lines `<token> <end, unix ms>` — at the server's time `now_ms`, longest first.
#[allow(dead_code)] // (the benchmark shares this file without the SQL backends)
fn sql_shares(holder: &str, now_ms: i64) -> Vec<(String, Option<Duration>)> {
    let mut shares: Vec<(String, Option<Duration>)> = holder
        .lines()
        .filter_map(|line| {
            let (token, end) = line.split_once(' ')?;
            let end: i64 = end.parse().ok()?;
            (!token.starts_with('!') && end > now_ms).then(|| {
                (
                    token.to_owned(),
                    Some(Duration::from_millis((end - now_ms) as u64)),
                )
            })
        })
        .collect();
    shares.sort_by_key(|share| std::cmp::Reverse(share.1));
    shares
}

/// What is left of a value dated by its writer (ZooKeeper's and etcd's shared results: the
/// instant it expires, unix ms by the writer's clock — this machine's — then the value).
fn dated_ttl(stored: &[u8]) -> Option<Duration> {
    let until = u64::from_le_bytes(stored.get(..8)?.try_into().ok()?);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_millis() as u64;
    (until > now).then(|| Duration::from_millis(until - now))
}

/// `PTTL` of `name` through `conn` (`None` without a TTL or key).
async fn ttl_with(conn: &mut impl redis::aio::ConnectionLike, name: &str) -> Option<Duration> {
    let pttl: i64 = redis::cmd("PTTL")
        .arg(name)
        .query_async(conn)
        .await
        .expect("PTTL");
    (pttl >= 0).then(|| Duration::from_millis(pttl as u64))
}

async fn delete_with(conn: &mut impl redis::aio::ConnectionLike, name: &str) {
    let _: i64 = redis::cmd("DEL")
        .arg(name)
        .query_async(conn)
        .await
        .expect("DEL");
}

async fn overwrite_with(
    conn: &mut impl redis::aio::ConnectionLike,
    name: &str,
    token: &str,
    ttl: Duration,
) {
    let _: () = redis::cmd("SET")
        .arg(name)
        .arg(token)
        .arg("PX")
        .arg(ttl.as_millis() as u64)
        .query_async(conn)
        .await
        .expect("SET");
}

/// `redlock://` over independent `redis-server`s of this test's own. What it "holds" is what a
/// majority of the nodes hold; tampering applies to every node.
pub struct RedlockFixture {
    pub servers: Vec<RedisServer>,
    tls: bool,
}

impl RedlockFixture {
    pub fn new(nodes: usize) -> RedlockFixture {
        RedlockFixture {
            servers: (0..nodes).map(|_| RedisServer::start()).collect(),
            tls: false,
        }
    }

    /// Over these (plain) servers.
    pub fn of(servers: Vec<RedisServer>) -> RedlockFixture {
        RedlockFixture {
            servers,
            tls: false,
        }
    }

    /// Over servers that speak TLS only (`redlocks://…?cacert=`).
    pub fn tls(nodes: usize) -> RedlockFixture {
        RedlockFixture {
            servers: (0..nodes).map(|_| RedisServer::start_tls()).collect(),
            tls: true,
        }
    }

    /// `redlock://127.0.0.1:p1,127.0.0.1:p2,…`
    pub fn url_of(servers: &[RedisServer]) -> String {
        RedlockFixture::url_with_ports(servers.iter().map(RedisServer::port), false)
    }

    fn url_with_ports(ports: impl Iterator<Item = u16>, tls: bool) -> String {
        let nodes: Vec<String> = ports.map(|port| format!("127.0.0.1:{port}")).collect();
        match tls {
            false => format!("redlock://{}", nodes.join(",")),
            true => format!(
                "redlocks://{}?cacert={}",
                nodes.join(","),
                super::certs::Certificates::shared().ca.display()
            ),
        }
    }

    /// The value at `name` on every running node (`None` for a node that is down).
    pub async fn values(&self, name: &str) -> Vec<Option<String>> {
        let mut values = Vec::new();
        for server in &self.servers {
            values.push(if server.is_running() {
                server.get(name).await
            } else {
                None
            });
        }
        values
    }
}

#[async_trait::async_trait(?Send)]
impl Fixture for RedlockFixture {
    /// The longest TTL among the nodes' copies (each node is written).
    async fn shared_ttl(&self, name: &str) -> Option<Duration> {
        let key = format!("lock-share:{name}");
        let mut longest = None;
        for server in &self.servers {
            let ttl = ttl_with(&mut server.connection().await, &key).await;
            longest = longest.max(ttl);
        }
        longest
    }

    fn url(&self) -> String {
        RedlockFixture::url_with_ports(self.servers.iter().map(RedisServer::port), self.tls)
    }

    async fn holder(&self, name: &str) -> Option<String> {
        let values = self.values(name).await;
        let majority = self.servers.len() / 2 + 1;
        values
            .iter()
            .flatten()
            .find(|v| values.iter().filter(|w| w.as_ref() == Some(*v)).count() >= majority)
            .cloned()
    }

    async fn ttl(&self, name: &str) -> Option<Duration> {
        let holder = self.holder(name).await?;
        let mut shortest: Option<Duration> = None;
        for server in &self.servers {
            if server.get(name).await.as_deref() == Some(holder.as_str())
                && let Some(ttl) = ttl_with(&mut server.connection().await, name).await
            {
                shortest = Some(shortest.map_or(ttl, |s| s.min(ttl)));
            }
        }
        shortest
    }

    async fn delete(&self, name: &str) {
        for server in &self.servers {
            RedisFixture::delete_on(server, name).await;
        }
    }

    async fn overwrite(&self, name: &str, token: &str, ttl: Duration) {
        for server in &self.servers {
            RedisFixture::overwrite_on(server, name, token, ttl).await;
        }
    }

    async fn slowed(&self, min: Duration, max: Duration) -> Slowed {
        let ports: Vec<u16> = self.servers.iter().map(RedisServer::port).collect();
        let proxies = slow_proxies(&ports, min, max).await;
        Slowed {
            url: RedlockFixture::url_with_ports(proxies.iter().map(|p| p.port()), self.tls),
            _keep: keep(proxies),
        }
    }

    async fn anything_at(&self, name: &str) -> bool {
        self.values(name).await.iter().any(Option::is_some)
    }
}

/// `redis+cluster://` over a three-master Redis Cluster of this test's own. Lock names are
/// hash-tagged in a cluster: `lock:K` is stored as `{lock:K}`.
pub struct ClusterFixture {
    pub cluster: RedisCluster,
}

impl ClusterFixture {
    pub fn new() -> ClusterFixture {
        ClusterFixture {
            cluster: RedisCluster::start(3, 0),
        }
    }

    /// A three-master cluster that speaks TLS only (`rediss+cluster://…?cacert=`).
    pub fn tls() -> ClusterFixture {
        ClusterFixture {
            cluster: RedisCluster::start_tls(3, 0),
        }
    }
}

#[async_trait::async_trait(?Send)]
impl Fixture for ClusterFixture {
    async fn shared_ttl(&self, name: &str) -> Option<Duration> {
        let key = format!("lock-share:{{{name}}}");
        ttl_with(&mut self.cluster.connection().await, &key).await
    }

    fn url(&self) -> String {
        self.cluster.url()
    }

    /// Read from the owning node on a plain connection of its own (not through the cluster's
    /// announced ports, which may be a test's proxies).
    async fn holder(&self, name: &str) -> Option<String> {
        let key = format!("{{{name}}}");
        for node in &self.cluster.nodes {
            let mut conn = node.connection().await;
            // A node that does not own the slot answers MOVED.
            let value: redis::RedisResult<Option<String>> =
                redis::cmd("GET").arg(&key).query_async(&mut conn).await;
            if let Ok(value) = value {
                return value;
            }
        }
        panic!("no node of the cluster serves {key}")
    }

    async fn ttl(&self, name: &str) -> Option<Duration> {
        ttl_with(&mut self.cluster.connection().await, &format!("{{{name}}}")).await
    }

    async fn readers(&self, name: &str) -> Vec<(String, Option<Duration>)> {
        readers_with(&mut self.cluster.connection().await, &format!("{{{name}}}")).await
    }

    async fn delete(&self, name: &str) {
        delete_with(&mut self.cluster.connection().await, &format!("{{{name}}}")).await;
    }

    async fn overwrite(&self, name: &str, token: &str, ttl: Duration) {
        let name = format!("{{{name}}}");
        overwrite_with(&mut self.cluster.connection().await, &name, token, ttl).await;
    }

    /// Every node announces its proxy's port (`cluster-announce-port`), so clients that
    /// discover the cluster, and follow its redirections, reach the nodes through the proxies.
    async fn slowed(&self, min: Duration, max: Duration) -> Slowed {
        let ports: Vec<u16> = self.cluster.nodes.iter().map(RedisServer::port).collect();
        let proxies = slow_proxies(&ports, min, max).await;
        let announced: Vec<u16> = proxies.iter().map(DelayProxy::port).collect();
        tokio::task::block_in_place(|| self.cluster.announce_ports(&announced));
        Slowed {
            url: RedisCluster::url_with_ports(announced.into_iter(), self.cluster.tls()),
            _keep: keep(proxies),
        }
    }
}

/// `redis+sentinel://…?replicas=1` over a master, one replica and one sentinel of this test's
/// own: every grant and renewal waits for the replica. What it holds is what the master holds.
/// The sentinel never fails the master over (failovers are `tests/it/sentinel.rs`'s): a fault on
/// the master stays a fault on the master.
pub struct SentinelFixture {
    pub group: SentinelGroup,
}

impl SentinelFixture {
    pub fn new() -> SentinelFixture {
        SentinelFixture {
            group: SentinelGroup::start_with(1, 1, std::time::Duration::from_secs(600)),
        }
    }

    fn master(&self) -> &RedisServer {
        &self.group.servers[0]
    }
}

#[async_trait::async_trait(?Send)]
impl Fixture for SentinelFixture {
    async fn shared_ttl(&self, name: &str) -> Option<Duration> {
        let key = format!("lock-share:{name}");
        ttl_with(&mut self.master().connection().await, &key).await
    }

    fn url(&self) -> String {
        self.group.url("?replicas=1")
    }

    async fn holder(&self, name: &str) -> Option<String> {
        self.master().get(name).await
    }

    async fn readers(&self, name: &str) -> Vec<(String, Option<Duration>)> {
        readers_with(&mut self.master().connection().await, name).await
    }

    async fn ttl(&self, name: &str) -> Option<Duration> {
        ttl_with(&mut self.master().connection().await, name).await
    }

    async fn delete(&self, name: &str) {
        RedisFixture::delete_on(self.master(), name).await;
    }

    async fn overwrite(&self, name: &str, token: &str, ttl: Duration) {
        RedisFixture::overwrite_on(self.master(), name, token, ttl).await;
    }

    /// A proxy in front of the master, and a sentinel of its own that names the proxy as the
    /// master of another service (and never fails it over): clients still find the master
    /// through a sentinel, and reach it through the proxy.
    async fn slowed(&self, min: Duration, max: Duration) -> Slowed {
        let proxies = slow_proxies(&[self.master().port()], min, max).await;
        let service = "slowed";
        let sentinel = Sentinel::start_patient(self.group.dir(), service, proxies[0].port());
        let url = format!(
            "redis+sentinel://127.0.0.1:{}/{service}?replicas=1",
            sentinel.port
        );
        let mut keep = keep(proxies);
        keep.push(Box::new(sentinel));
        Slowed { url, _keep: keep }
    }
}

/// `postgres://` on the binary's shared PostgreSQL server, with a lock table of this test's own
/// (`?table=` in the URL). What it "holds" is a row whose expiry has not passed.
pub struct PostgresFixture {
    pub server: Server<PostgresServer>,
    table: String,
    client: tokio::sync::Mutex<Option<std::sync::Arc<tokio_postgres::Client>>>,
    /// The lock clients connect through PgBouncer in transaction mode (`pooler=transaction`),
    /// with `listen_url` naming the server itself when `.1`.
    pooled: Option<(Server<PgBouncer>, bool)>,
}

impl PostgresFixture {
    pub fn new() -> PostgresFixture {
        PostgresFixture::on(Server::Shared(PostgresServer::shared()))
    }

    /// On the binary's shared server that accepts TLS connections only (`sslmode=verify-full`
    /// with the test CA in the URL); the fixture looks through the Unix socket.
    pub fn tls() -> PostgresFixture {
        PostgresFixture::on(Server::Shared(PostgresServer::shared_tls()))
    }

    /// On a server of this test's own that logs every statement (so a test can count them).
    pub fn own() -> PostgresFixture {
        let server = PostgresServer::start_with(&[
            "-c",
            "log_statement=all",
            "-c",
            "log_line_prefix=%m [%p] ",
        ]);
        PostgresFixture::on(Server::Own(server))
    }

    /// Through the binary's shared PgBouncer (transaction mode) in front of its shared
    /// server: `pooler=transaction`, and `listen_url` naming the server when `listen` (else
    /// waiters poll).
    pub fn pgbouncer(listen: bool) -> PostgresFixture {
        let mut fixture = PostgresFixture::new();
        fixture.pooled = Some((Server::Shared(PgBouncer::shared()), listen));
        fixture
    }

    /// Through a PgBouncer of this test's own (transaction mode) in front of a server of its
    /// own: both can be killed, paused and restarted.
    pub fn own_pgbouncer(listen: bool) -> PostgresFixture {
        let server = PostgresServer::start_with(&[
            "-c",
            "log_statement=all",
            "-c",
            "log_line_prefix=%m [%p] ",
        ]);
        let bouncer = PgBouncer::start(&server);
        let mut fixture = PostgresFixture::on(Server::Own(server));
        fixture.pooled = Some((Server::Own(bouncer), listen));
        fixture
    }

    /// The PgBouncer in front.
    pub fn bouncer(&self) -> &PgBouncer {
        &self.pooled.as_ref().expect("a fixture through PgBouncer").0
    }

    /// The test's own PgBouncer in front (see [`own_pgbouncer`](Self::own_pgbouncer)).
    pub fn bouncer_mut(&mut self) -> &mut PgBouncer {
        self.pooled
            .as_mut()
            .expect("a fixture through PgBouncer")
            .0
            .own_mut()
    }

    fn on(server: Server<PostgresServer>) -> PostgresFixture {
        PostgresFixture {
            server,
            table: unique("locks").replace('-', "_"),
            client: tokio::sync::Mutex::new(None),
            pooled: None,
        }
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// A plain connection for looking at the table (a new one after a restart of the server);
    /// the table itself is made by the first lock client (the backend creates it on connect).
    pub async fn sql(&self) -> std::sync::Arc<tokio_postgres::Client> {
        let mut client = self.client.lock().await;
        match &*client {
            Some(open) if !open.is_closed() => open.clone(),
            _ => client
                .insert(std::sync::Arc::new(self.server.client().await))
                .clone(),
        }
    }

    /// Runs `statement`; a table not created yet (no client connected so far) reads as empty,
    /// and so does a name PostgreSQL cannot hold (a NUL byte: such keys are refused anyway).
    async fn rows(
        &self,
        statement: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Vec<tokio_postgres::Row> {
        match self.sql().await.query(statement, params).await {
            Ok(rows) => rows,
            Err(e)
                if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE)
                    || e.code()
                        == Some(&tokio_postgres::error::SqlState::CHARACTER_NOT_IN_REPERTOIRE) =>
            {
                Vec::new()
            }
            Err(e) => panic!("{statement}: {e:?}"),
        }
    }
}

#[async_trait::async_trait(?Send)]
impl Fixture for PostgresFixture {
    async fn shared_ttl(&self, name: &str) -> Option<Duration> {
        let sql = format!(
            "SELECT (extract(epoch FROM expires_at - now()) * 1000)::int8 FROM {}_shared \
             WHERE name = $1 AND expires_at > now()",
            self.table
        );
        let rows = self.rows(&sql, &[&name]).await;
        rows.first()
            .map(|r| Duration::from_millis(r.get::<_, i64>(0).max(0) as u64))
    }

    fn url(&self) -> String {
        if let Some((bouncer, listen)) = &self.pooled {
            let listen = match listen {
                true => format!("&listen_url={}", self.server.url()),
                false => String::new(),
            };
            return format!(
                "{}?table={}&pooler=transaction{listen}",
                bouncer.url(),
                self.table
            );
        }
        let url = self.server.url();
        let join = if url.contains('?') { '&' } else { '?' };
        format!("{url}{join}table={}", self.table)
    }

    async fn holder(&self, name: &str) -> Option<String> {
        let sql = format!(
            "SELECT token FROM {} WHERE name = $1 AND expires_at > now()",
            self.table
        );
        self.rows(&sql, &[&name]).await.first().map(|r| r.get(0))
    }

    /// The shares in the live readers' row (token `readers`): lines `<token> <end, unix ms>` in
    /// its `holder` column, live by the server's clock.
    async fn readers(&self, name: &str) -> Vec<(String, Option<Duration>)> {
        let sql = format!(
            "SELECT holder, (extract(epoch FROM now()) * 1000)::int8 FROM {} \
             WHERE name = $1 AND token = 'readers' AND expires_at > now()",
            self.table
        );
        let rows = self.rows(&sql, &[&name]).await;
        let Some(row) = rows.first() else {
            return Vec::new();
        };
        sql_shares(row.get(0), row.get(1))
    }

    /// A semaphore's permits: shares in its row (token `permits:<n>`), as readers' are.
    async fn permits(&self, name: &str) -> Vec<(String, Option<Duration>)> {
        let sql = format!(
            "SELECT holder, (extract(epoch FROM now()) * 1000)::int8 FROM {} \
             WHERE name = $1 AND token LIKE 'permits:%' AND expires_at > now()",
            self.table
        );
        let rows = self.rows(&sql, &[&name]).await;
        let Some(row) = rows.first() else {
            return Vec::new();
        };
        sql_shares(row.get(0), row.get(1))
    }

    async fn ttl(&self, name: &str) -> Option<Duration> {
        let sql = format!(
            "SELECT (extract(epoch FROM expires_at - now()) * 1000)::int8 FROM {} \
             WHERE name = $1 AND expires_at > now()",
            self.table
        );
        let rows = self.rows(&sql, &[&name]).await;
        rows.first()
            .map(|r| Duration::from_millis(r.get::<_, i64>(0).max(0) as u64))
    }

    async fn delete(&self, name: &str) {
        let sql = format!("DELETE FROM {} WHERE name = $1", self.table);
        self.rows(&sql, &[&name]).await;
    }

    async fn overwrite(&self, name: &str, token: &str, ttl: Duration) {
        self.client().await; // makes the table
        let sql = format!(
            "INSERT INTO {} (name, token, expires_at, holder, acquired_at) \
             VALUES ($1, $2, now() + $3::int8 * interval '1 millisecond', 'a test', now()) \
             ON CONFLICT (name) DO UPDATE SET token = excluded.token, \
             expires_at = excluded.expires_at",
            self.table
        );
        let ms = ttl.as_millis() as i64;
        self.rows(&sql, &[&name, &token, &ms]).await;
    }

    async fn slowed(&self, min: Duration, max: Duration) -> Slowed {
        let port = match &self.pooled {
            Some((bouncer, _)) => bouncer.port(),
            None => self.server.port(),
        };
        slowed_url(&self.url(), port, min, max).await
    }

    async fn anything_at(&self, name: &str) -> bool {
        let sql = format!("SELECT 1 FROM {} WHERE name = $1", self.table);
        !self.rows(&sql, &[&name]).await.is_empty()
    }
}

/// `postgres://…?mode=advisory` on a database of this test's own on the binary's shared
/// PostgreSQL server. What it "holds" is a granted advisory lock whose holder's session carries
/// distlock's comment (`/* distlock <lease> <fence> <token> <name in hex> */`); its TTL is the
/// lease less the time the session has been idle.
pub struct AdvisoryFixture {
    pub server: Server<PostgresServer>,
    database: String,
    /// The URL's `max_lease_ms`: how long a restarted server grants nothing.
    max_lease_ms: u64,
    client: tokio::sync::Mutex<Option<std::sync::Arc<tokio_postgres::Client>>>,
    /// The connections holding the locks `overwrite` took.
    others: tokio::sync::Mutex<Vec<tokio_postgres::Client>>,
}

impl AdvisoryFixture {
    /// Any lease the suites ask for, up to the longest (7 days): the restart guard waits that
    /// long only after a restart of a server that granted locks, and this one never restarts.
    pub fn new() -> AdvisoryFixture {
        AdvisoryFixture::on(Server::Shared(PostgresServer::shared()), 604_800_000)
    }

    /// On a server of this test's own that logs every statement (so a test can count them),
    /// which a fault may restart: leases up to 3 s, so a restarted server grants again 3 s
    /// after it started.
    pub fn own() -> AdvisoryFixture {
        let server = PostgresServer::start_with(&[
            "-c",
            "log_statement=all",
            "-c",
            "log_line_prefix=%m [%p] ",
        ]);
        AdvisoryFixture::on(Server::Own(server), 3_000)
    }

    fn on(server: Server<PostgresServer>, max_lease_ms: u64) -> AdvisoryFixture {
        let database = unique("advisory").replace('-', "_");
        let url = server.url();
        let create = format!("CREATE DATABASE {database}");
        // A database of its own: advisory locks are per database, and tests share the server.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .expect("connect to the test postgres");
                tokio::spawn(connection);
                client
                    .batch_execute(&create)
                    .await
                    .expect("create database");
            })
        })
        .join()
        .unwrap();
        AdvisoryFixture {
            server,
            database,
            max_lease_ms,
            client: tokio::sync::Mutex::new(None),
            others: tokio::sync::Mutex::new(Vec::new()),
        }
    }

    async fn connect(&self) -> tokio_postgres::Client {
        let url = self.server.url_for(&self.database);
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("connect to the test database");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
    }

    /// A plain connection to the test's database (a new one after a restart of the server).
    pub async fn sql(&self) -> std::sync::Arc<tokio_postgres::Client> {
        let mut client = self.client.lock().await;
        match &*client {
            Some(open) if !open.is_closed() => open.clone(),
            _ => client
                .insert(std::sync::Arc::new(self.connect().await))
                .clone(),
        }
    }

    /// The holder of the advisory lock of backend name `name` (the writer): its backend pid,
    /// lease, owner token, and how long its session has been idle (zero while a statement
    /// runs).
    pub async fn held(&self, name: &str) -> Option<(i32, Duration, String, Duration)> {
        self.holds(name, "ExclusiveLock").await.into_iter().next()
    }

    /// The sessions holding the advisory lock of `name` in `mode` (`ExclusiveLock`,
    /// `ShareLock`, or `%` for any), as [`held`](Self::held) describes each.
    pub async fn holds(&self, name: &str, mode: &str) -> Vec<(i32, Duration, String, Duration)> {
        let key = distlock::admin::advisory_key(name) as u64;
        let rows = self
            .sql()
            .await
            .query(
                "SELECT a.pid, a.query, CASE WHEN a.state = 'idle' THEN \
                 (extract(epoch FROM clock_timestamp() - a.state_change) * 1000)::int8 ELSE 0 END \
                 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
                 AND l.classid = $1::int8::oid AND l.objid = $2::int8::oid AND l.mode LIKE $3 \
                 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                &[&((key >> 32) as i64), &((key & 0xffff_ffff) as i64), &mode],
            )
            .await
            .expect("pg_locks");
        rows.iter()
            .filter_map(|row| {
                let query: String = row.get(1);
                let note = query.split("/* distlock ").nth(1)?.to_owned();
                let mut parts = note.split(' ');
                let lease = Duration::from_millis(parts.next()?.parse().ok()?);
                let token = parts.nth(1)?.to_owned();
                let idle = Duration::from_millis(row.get::<_, i64>(2).max(0) as u64);
                Some((row.get(0), lease, token, idle))
            })
            .collect()
    }
}

#[async_trait::async_trait(?Send)]
impl Fixture for AdvisoryFixture {
    async fn shared_ttl(&self, name: &str) -> Option<Duration> {
        let rows = self
            .sql()
            .await
            .query(
                "SELECT (extract(epoch FROM expires_at - now()) * 1000)::int8 \
                 FROM distlock_locks_shared WHERE name = $1 AND expires_at > now()",
                &[&name],
            )
            .await
            .expect("read the shared results' table");
        rows.first()
            .map(|r| Duration::from_millis(r.get::<_, i64>(0).max(0) as u64))
    }

    /// The default lease fits in `max_lease_ms`.
    fn builder(&self) -> LockClientBuilder {
        let longest = Duration::from_millis(self.max_lease_ms);
        LockClient::builder(self.url()).default_lease(longest.min(Duration::from_secs(30)))
    }

    fn url(&self) -> String {
        format!(
            "{}?mode=advisory&max_lease_ms={}",
            self.server.url_for(&self.database),
            self.max_lease_ms
        )
    }

    fn fencing_consecutive(&self) -> bool {
        false
    }

    /// An upgraded read's share (beside its write lock, on one session) is not a reader's.
    async fn readers(&self, name: &str) -> Vec<(String, Option<Duration>)> {
        let writer = self.held(name).await.map(|(pid, ..)| pid);
        let mut readers: Vec<_> = self
            .holds(name, "ShareLock")
            .await
            .into_iter()
            .filter(|(pid, ..)| Some(*pid) != writer)
            .map(|(_, lease, token, idle)| (token, Some(lease.saturating_sub(idle))))
            .collect();
        readers.sort_by_key(|r| std::cmp::Reverse(r.1));
        readers
    }

    async fn holder(&self, name: &str) -> Option<String> {
        self.held(name).await.map(|(_, _, token, _)| token)
    }

    /// Any session holding the key's advisory lock, writer or reader.
    async fn anything_at(&self, name: &str) -> bool {
        !self.holds(name, "%").await.is_empty()
    }

    /// The writer's remaining lease, or else the longest of its readers'.
    async fn ttl(&self, name: &str) -> Option<Duration> {
        self.holds(name, "%")
            .await
            .into_iter()
            .map(|(_, lease, _, idle)| lease.saturating_sub(idle))
            .max()
    }

    /// Ends the holder's session (`pg_terminate_backend`), and with it the lock.
    async fn delete(&self, name: &str) {
        if let Some((pid, ..)) = self.held(name).await {
            self.sql()
                .await
                .execute("SELECT pg_terminate_backend($1)", &[&pid])
                .await
                .expect("terminate the holder");
            let freed = super::eventually(Duration::from_secs(5), || async {
                self.held(name).await.is_none()
            })
            .await;
            assert!(freed, "the holder's session of {name} did not end");
        }
    }

    /// Ends the holder's session and takes the lock on a connection of the fixture's own, under
    /// `token`, for `ttl` (its idle-session timeout).
    async fn overwrite(&self, name: &str, token: &str, ttl: Duration) {
        self.delete(name).await;
        let other = self.connect().await;
        let ms = ttl.as_millis();
        let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
        other
            .batch_execute(&format!(
                "SELECT pg_advisory_lock({}), set_config('idle_session_timeout', '{ms}', false) \
                 /* distlock {ms} - {token} {hex} */",
                distlock::admin::advisory_key(name)
            ))
            .await
            .expect("take the lock as another owner");
        self.others.lock().await.push(other);
    }

    async fn slowed(&self, min: Duration, max: Duration) -> Slowed {
        slowed_url(&self.url(), self.server.port(), min, max).await
    }
}

/// `mysql://` on the binary's shared MariaDB server, with a lock table of this test's own.
/// What it "holds" is a row whose expiry (UTC, the server's clock) has not passed.
pub struct MysqlFixture {
    pub server: Server<MysqlServer>,
    table: String,
    conn: tokio::sync::Mutex<Option<mysql_async::Conn>>,
}

impl MysqlFixture {
    pub fn new() -> MysqlFixture {
        MysqlFixture::on(Server::Shared(MysqlServer::shared()))
    }

    /// On a server of this test's own.
    pub fn own() -> MysqlFixture {
        MysqlFixture::on(Server::Own(MysqlServer::start()))
    }

    /// On the binary's shared server that accepts TLS connections only
    /// (`ssl-mode=VERIFY_IDENTITY` with the test CA in the URL).
    pub fn tls() -> MysqlFixture {
        MysqlFixture::on(Server::Shared(MysqlServer::shared_tls()))
    }

    fn on(server: Server<MysqlServer>) -> MysqlFixture {
        MysqlFixture {
            server,
            table: unique("locks").replace('-', "_"),
            conn: tokio::sync::Mutex::new(None),
        }
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// Runs `statement` with `params` and returns its rows; a table not created yet reads as
    /// empty. A connection lost (the server restarted) is made again, once.
    pub async fn rows<T: mysql_async::prelude::FromRow + Send + 'static>(
        &self,
        statement: &str,
        params: impl Into<mysql_async::Params> + Send,
    ) -> Vec<T> {
        use mysql_async::prelude::Queryable;
        let params = params.into();
        let mut conn = self.conn.lock().await;
        for attempt in 0..2 {
            if conn.is_none() {
                *conn = Some(self.server.conn().await);
            }
            match conn.as_mut().unwrap().exec(statement, params.clone()).await {
                Ok(rows) => return rows,
                Err(mysql_async::Error::Server(e)) if e.code == 1146 => return Vec::new(),
                Err(mysql_async::Error::Server(e)) => panic!("{statement}: {e:?}"),
                Err(e) if attempt == 0 => {
                    eprintln!("the fixture's connection failed ({e}): connecting again");
                    *conn = None;
                }
                Err(e) => panic!("{statement}: {e:?}"),
            }
        }
        unreachable!()
    }
}

#[async_trait::async_trait(?Send)]
impl Fixture for MysqlFixture {
    async fn shared_ttl(&self, name: &str) -> Option<Duration> {
        let sql = format!(
            "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) FROM {}_shared \
             WHERE name = ? AND expires_at > UTC_TIMESTAMP(6)",
            self.table
        );
        self.rows::<i64>(&sql, (name.as_bytes(),))
            .await
            .into_iter()
            .next()
            .map(|us| Duration::from_micros(us.max(0) as u64))
    }

    fn url(&self) -> String {
        let url = self.server.url();
        let join = if url.contains('?') { '&' } else { '?' };
        format!("{url}{join}table={}", self.table)
    }

    async fn holder(&self, name: &str) -> Option<String> {
        let sql = format!(
            "SELECT token FROM {} WHERE name = ? AND expires_at > UTC_TIMESTAMP(6)",
            self.table
        );
        self.rows::<String>(&sql, (name.as_bytes(),))
            .await
            .into_iter()
            .next()
    }

    async fn ttl(&self, name: &str) -> Option<Duration> {
        let sql = format!(
            "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) FROM {} \
             WHERE name = ? AND expires_at > UTC_TIMESTAMP(6)",
            self.table
        );
        self.rows::<i64>(&sql, (name.as_bytes(),))
            .await
            .into_iter()
            .next()
            .map(|us| Duration::from_micros(us.max(0) as u64))
    }

    async fn delete(&self, name: &str) {
        let sql = format!("DELETE FROM {} WHERE name = ?", self.table);
        self.rows::<i64>(&sql, (name.as_bytes(),)).await;
    }

    async fn overwrite(&self, name: &str, token: &str, ttl: Duration) {
        self.client().await; // makes the table
        let sql = format!(
            "INSERT INTO {} (name, token, expires_at, holder, acquired_at) \
             VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, 'a test', UTC_TIMESTAMP(6)) \
             ON DUPLICATE KEY UPDATE token = VALUES(token), expires_at = VALUES(expires_at)",
            self.table
        );
        let us = ttl.as_micros() as i64;
        self.rows::<i64>(&sql, (name.as_bytes(), token, us)).await;
    }

    async fn slowed(&self, min: Duration, max: Duration) -> Slowed {
        slowed_url(&self.url(), self.server.port(), min, max).await
    }

    /// The lock row, or any share or writer's mark of it (rows `name + 0x01 + token`,
    /// `name + 0x02 + token`).
    async fn anything_at(&self, name: &str) -> bool {
        let sql = format!(
            "SELECT 1 FROM {} WHERE name = ? OR (name > CONCAT(?, x'01') AND name < CONCAT(?, x'03'))",
            self.table
        );
        let bytes = name.as_bytes();
        !self
            .rows::<i64>(&sql, (bytes, bytes, bytes))
            .await
            .is_empty()
    }

    /// The live share rows `name + 0x01 + token`, each with its own lease — but for the one
    /// an upgrade left under its writer's lock row (the same token), which counts for nothing.
    async fn readers(&self, name: &str) -> Vec<(String, Option<Duration>)> {
        let sql = format!(
            "SELECT token, CAST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) AS SIGNED) \
             FROM {t} s WHERE name > CONCAT(?, x'01') AND name < CONCAT(?, x'02') \
             AND expires_at > UTC_TIMESTAMP(6) \
             AND NOT EXISTS (SELECT 1 FROM {t} l WHERE l.name = ? AND l.token = s.token) \
             ORDER BY expires_at DESC",
            t = self.table
        );
        let bytes = name.as_bytes();
        self.rows::<(String, i64)>(&sql, (bytes, bytes, bytes))
            .await
            .into_iter()
            .map(|(token, us)| (token, Some(Duration::from_micros(us.max(0) as u64))))
            .collect()
    }
}

/// `mysql://…/<database>?mode=named` on the binary's shared MariaDB server, in a database of
/// this test's own (distlock's named locks belong to the URL's database). What it "holds" is
/// the named lock `distlock::admin::mysql_lock_name(database, name)` of a connection that
/// also holds the note locks `dl~<id>~<i>~<part>` naming the owner token and lease; its TTL
/// is the lease less the time the connection has been idle.
pub struct NamedFixture {
    pub server: Server<MysqlServer>,
    database: String,
    conn: tokio::sync::Mutex<Option<mysql_async::Conn>>,
    /// The connections holding the locks `overwrite` took.
    others: tokio::sync::Mutex<Vec<mysql_async::Conn>>,
    /// The statements [`rows`](Self::rows) sent.
    sent: std::sync::atomic::AtomicU64,
}

/// A named lock's holder as the server shows it: connection id, owner token, lease, fencing
/// token, idle time.
pub type NamedHolder = (u32, String, Duration, Option<u64>, Duration);

impl NamedFixture {
    pub fn new() -> NamedFixture {
        NamedFixture::on(Server::Shared(MysqlServer::shared()))
    }

    /// On a server of this test's own, which a fault may pause, kill and restart.
    pub fn own() -> NamedFixture {
        NamedFixture::on(Server::Own(MysqlServer::start()))
    }

    fn on(server: Server<MysqlServer>) -> NamedFixture {
        let database = unique("named").replace('-', "_");
        let (made, port) = (database.clone(), server.port());
        // The database first: distlock's named locks belong to the URL's.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                use mysql_async::prelude::Queryable;
                let url = format!(
                    "mysql://{}:{}@127.0.0.1:{port}/",
                    super::mysql::USER,
                    super::mysql::PASSWORD
                );
                let opts = mysql_async::OptsBuilder::from_opts(
                    mysql_async::Opts::from_url(&url).expect("test URL"),
                )
                .prefer_socket(false);
                let mut conn = mysql_async::Conn::new(opts).await.expect("connect");
                conn.query_drop(format!("CREATE DATABASE IF NOT EXISTS {made}"))
                    .await
                    .expect("create the test database");
                let _ = conn.disconnect().await;
            })
        })
        .join()
        .unwrap();
        NamedFixture {
            server,
            database,
            conn: tokio::sync::Mutex::new(None),
            others: tokio::sync::Mutex::new(Vec::new()),
            sent: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The test's database.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// How many statements [`rows`](Self::rows) sent.
    pub fn statements(&self) -> u64 {
        self.sent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The named lock of backend name `name`.
    pub fn lock_name(&self, name: &str) -> String {
        distlock::admin::mysql_lock_name(&self.database, name)
    }

    /// Runs `statement` on the fixture's connection (made again once if it broke).
    pub async fn rows<T: mysql_async::prelude::FromRow + Send + 'static>(
        &self,
        statement: &str,
        params: impl Into<mysql_async::Params> + Send,
    ) -> Vec<T> {
        use mysql_async::prelude::Queryable;
        let params = params.into();
        let mut conn = self.conn.lock().await;
        for attempt in 0..2 {
            if conn.is_none() {
                *conn = Some(self.server.conn().await);
            }
            self.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match conn.as_mut().unwrap().exec(statement, params.clone()).await {
                Ok(rows) => return rows,
                Err(mysql_async::Error::Server(e)) => panic!("{statement}: {e:?}"),
                Err(e) if attempt == 0 => {
                    eprintln!("the fixture's connection failed ({e}): connecting again");
                    *conn = None;
                }
                Err(e) => panic!("{statement}: {e:?}"),
            }
        }
        unreachable!()
    }

    /// The holder of `name`'s named lock, as its note locks say.
    pub async fn held(&self, name: &str) -> Option<NamedHolder> {
        let rows: Vec<(u32, String, Option<String>, Option<i64>)> = self
            .rows(
                "SELECT m.THREAD_ID, m.TABLE_SCHEMA, p.COMMAND, CAST(p.TIME_MS AS SIGNED) \
                 FROM information_schema.METADATA_LOCK_INFO m \
                 JOIN information_schema.PROCESSLIST p ON p.ID = m.THREAD_ID \
                 WHERE m.LOCK_TYPE = 'User lock' AND m.THREAD_ID = IS_USED_LOCK(?)",
                (self.lock_name(name),),
            )
            .await;
        let (id, _, command, ms) = rows.first()?.clone();
        let mut parts: Vec<(u32, String)> = rows
            .iter()
            .filter_map(|(_, lock, _, _)| {
                let rest = lock.strip_prefix("dl~")?;
                let (_, rest) = rest.split_once('~')?;
                let (i, part) = rest.split_once('~')?;
                Some((i.parse().ok()?, part.to_owned()))
            })
            .collect();
        parts.sort();
        let note: String = parts.into_iter().map(|(_, p)| p).collect();
        let mut fields = note.splitn(3, '~');
        let fence = fields.next()?.parse().ok();
        let lease = Duration::from_millis(fields.next()?.parse().ok()?);
        let token = fields.next()?.to_owned();
        let idle = match command.as_deref() {
            Some("Sleep") => Duration::from_millis(ms.unwrap_or(0).max(0) as u64),
            _ => Duration::ZERO,
        };
        Some((id, token, lease, fence, idle))
    }
}

#[async_trait::async_trait(?Send)]
impl Fixture for NamedFixture {
    async fn shared_ttl(&self, name: &str) -> Option<Duration> {
        let sql = format!(
            "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) \
             FROM {}.distlock_locks_shared WHERE name = ? AND expires_at > UTC_TIMESTAMP(6)",
            self.database
        );
        self.rows::<i64>(&sql, (name.as_bytes(),))
            .await
            .into_iter()
            .next()
            .map(|us| Duration::from_micros(us.max(0) as u64))
    }

    fn url(&self) -> String {
        format!("{}?mode=named", self.server.url_for(&self.database))
    }

    async fn holder(&self, name: &str) -> Option<String> {
        self.held(name).await.map(|(_, token, ..)| token)
    }

    async fn ttl(&self, name: &str) -> Option<Duration> {
        self.held(name)
            .await
            .map(|(_, _, lease, _, idle)| lease.saturating_sub(idle))
    }

    /// Whether any connection holds the key's named lock (distlock's or not).
    async fn anything_at(&self, name: &str) -> bool {
        let held: Vec<Option<u32>> = self
            .rows("SELECT IS_USED_LOCK(?)", (self.lock_name(name),))
            .await;
        held.first().copied().flatten().is_some()
    }

    /// Ends the holder's session (`KILL CONNECTION`), and with it the lock.
    async fn delete(&self, name: &str) {
        let held: Vec<Option<u32>> = self
            .rows("SELECT IS_USED_LOCK(?)", (self.lock_name(name),))
            .await;
        if let Some(id) = held.first().copied().flatten() {
            use mysql_async::prelude::Queryable;
            let mut conn = self.server.conn().await;
            let _ = conn.query_drop(format!("KILL CONNECTION {id}")).await;
            let freed = super::eventually(Duration::from_secs(5), || async {
                !self.anything_at(name).await
            })
            .await;
            assert!(freed, "the holder's session of {name} did not end");
        }
    }

    /// Ends the holder's session and takes the lock on a connection of the fixture's own,
    /// under `token`, for `ttl` (its `wait_timeout`, whole seconds).
    async fn overwrite(&self, name: &str, token: &str, ttl: Duration) {
        use mysql_async::prelude::Queryable;
        self.delete(name).await;
        let mut other = self.server.conn().await;
        let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        other
            .query_drop(format!("SET SESSION wait_timeout = {}", seconds.max(1)))
            .await
            .expect("set the lease");
        let id = format!("{:016x}", distlock::admin::advisory_key(token) as u64);
        let note = format!("-~{}~{token}", ttl.as_millis());
        let mut locks = vec![self.lock_name(name)];
        locks.extend(
            note.as_bytes()
                .chunks(42)
                .enumerate()
                .map(|(i, part)| format!("dl~{id}~{i}~{}", String::from_utf8_lossy(part))),
        );
        for lock in locks {
            let taken: Option<i64> = other
                .exec_first("SELECT GET_LOCK(?, 0)", (lock,))
                .await
                .expect("take the lock as another owner");
            assert_eq!(taken, Some(1));
        }
        self.others.lock().await.push(other);
    }

    async fn slowed(&self, min: Duration, max: Duration) -> Slowed {
        slowed_url(&self.url(), self.server.port(), min, max).await
    }
}

/// A chroot of this test's own on the binary's shared ZooKeeper server.
pub struct ZookeeperFixture {
    pub server: Server<super::zookeeper::ZkServer>,
    pub chroot: String,
    /// After the URL: `?recipe=rwlock` for nodes in the layout of Curator's read/write lock.
    query: &'static str,
    /// The fixture's own session: what it looks with, and owns the nodes it plants.
    zk: tokio::sync::OnceCell<zookeeper_client::Client>,
}

impl ZookeeperFixture {
    pub fn new() -> ZookeeperFixture {
        ZookeeperFixture::on(Server::Shared(super::zookeeper::ZkServer::shared()))
    }

    /// On a server of this test's own.
    pub fn own() -> ZookeeperFixture {
        ZookeeperFixture::on(Server::Own(super::zookeeper::ZkServer::start()))
    }

    /// On a server of this test's own with these `zoo.cfg` lines (see
    /// [`ZkServer::start_configured`](super::zookeeper::ZkServer::start_configured)).
    pub fn configured(lines: &str) -> ZookeeperFixture {
        ZookeeperFixture::on(Server::Own(super::zookeeper::ZkServer::start_configured(
            lines,
        )))
    }

    /// On the binary's shared server whose clients connect over TLS (`zks://`, the test CA in
    /// the URL); the fixture looks through the plain port.
    pub fn tls() -> ZookeeperFixture {
        ZookeeperFixture::on(Server::Shared(super::zookeeper::ZkServer::shared_tls()))
    }

    /// Nodes in the layout of Curator's `InterProcessReadWriteLock` (`?recipe=rwlock`).
    pub fn rwlock() -> ZookeeperFixture {
        ZookeeperFixture {
            query: "?recipe=rwlock",
            ..ZookeeperFixture::new()
        }
    }

    fn on(server: Server<super::zookeeper::ZkServer>) -> ZookeeperFixture {
        ZookeeperFixture {
            server,
            query: "",
            chroot: format!("/{}", unique("conformance")),
            zk: tokio::sync::OnceCell::new(),
        }
    }

    pub async fn zk(&self) -> &zookeeper_client::Client {
        self.zk
            .get_or_init(|| super::zookeeper::client(self.server.client_port))
            .await
    }

    /// The node under which lock `name` queues.
    pub fn parent(&self, name: &str) -> String {
        format!(
            "{}{}",
            self.chroot,
            distlock::__private::testing::zookeeper_parent(name)
        )
    }

    /// The queue of lock `name`: node names, lowest sequence (the holder) first.
    pub async fn queue(&self, name: &str) -> Vec<String> {
        if name.len() > 4 * distlock::LockClient::MAX_KEY_LEN {
            // Longer than any lock name: no node can exist, and ZooKeeper would refuse the
            // request (and drop the connection).
            return Vec::new();
        }
        let mut children = match self.zk().await.list_children(&self.parent(name)).await {
            Ok(children) => children,
            Err(zookeeper_client::Error::NoNode) => Vec::new(),
            Err(error) => panic!("list the queue of {:.60}: {error}", name),
        };
        // By the sequence number: the digits the name ends in.
        children.sort_by_key(|c| {
            let digits = c.bytes().rev().take_while(u8::is_ascii_digit).count();
            c[c.len() - digits..].to_owned()
        });
        children
    }

    /// The holder's node: its name, data and stat.
    pub async fn holder_node(
        &self,
        name: &str,
    ) -> Option<(String, String, zookeeper_client::Stat)> {
        let first = self.queue(name).await.into_iter().next()?;
        let path = format!("{}/{first}", self.parent(name));
        let (data, stat) = self.zk().await.get_data(&path).await.ok()?;
        Some((first, String::from_utf8_lossy(&data).into_owned(), stat))
    }
}

#[async_trait::async_trait(?Send)]
impl Fixture for ZookeeperFixture {
    /// Over TLS (`zks://`), connecting includes the Java server's TLS handshake, which a
    /// busy host has pushed past the default 3 s (three conformance cases at once, load
    /// average 7.5 on two cores): the fixture's clients allow 10 s. No promise under test
    /// depends on how fast a client connects (`zookeeper::nobody_listening…` checks the
    /// connect timeout with a client of its own).
    fn builder(&self) -> LockClientBuilder {
        let url = self.url();
        let tls = url.starts_with("zks://");
        let builder = LockClient::builder(url);
        match tls {
            true => builder.connect_timeout(Duration::from_secs(10)),
            false => builder,
        }
    }

    /// From the expiry the node's data starts with (unix ms, the writer's clock: this one's).
    async fn shared_ttl(&self, name: &str) -> Option<Duration> {
        let path = format!(
            "{}/%shared{}",
            self.chroot,
            distlock::__private::testing::zookeeper_parent(name)
        );
        dated_ttl(&self.zk().await.get_data(&path).await.ok()?.0)
    }

    fn url(&self) -> String {
        let url = self.server.url(&self.chroot);
        match url.split_once('?') {
            Some((url, tls)) if !self.query.is_empty() => format!("{url}{}&{tls}", self.query),
            _ => format!("{url}{}", self.query),
        }
    }

    async fn holder(&self, name: &str) -> Option<String> {
        let (node, _, _) = self.holder_node(name).await?;
        Some(
            distlock::__private::testing::zookeeper_node(&node)
                .2
                .to_owned(),
        )
    }

    /// How long the server would keep the lock if its holder stopped now: what is left of
    /// an unrenewed lock's lease, or a renewed lock's whole lease (its session timeout: the
    /// session's heartbeats keep it full).
    async fn ttl(&self, name: &str) -> Option<Duration> {
        let (_, data, stat) = self.holder_node(name).await?;
        zk_ttl(&data, &stat)
    }

    /// The readers at the head of the queue (nodes `<token>-r-lock-<sequence>` before the first
    /// writer's), each with what is left of its lease as [`ttl`](Self::ttl) counts it.
    async fn readers(&self, name: &str) -> Vec<(String, Option<Duration>)> {
        let mut readers = Vec::new();
        for node in self.queue(name).await {
            let (mode, permits, token) = distlock::__private::testing::zookeeper_node(&node);
            if mode != distlock::LockMode::Read || permits.is_some() {
                break;
            }
            let path = format!("{}/{node}", self.parent(name));
            if let Ok((data, stat)) = self.zk().await.get_data(&path).await {
                let data = String::from_utf8_lossy(&data).into_owned();
                readers.push((token.to_owned(), zk_ttl(&data, &stat)));
            }
        }
        readers
    }

    /// The permits of the semaphore at the head of the queue: its first `n` nodes
    /// (`<token>-p<n>-lock-<sequence>`, `n` the limit), each with what is left of its lease.
    async fn permits(&self, name: &str) -> Vec<(String, Option<Duration>)> {
        let mut permits = Vec::new();
        let mut limit = usize::MAX;
        for node in self.queue(name).await {
            let (_, limit_of, token) = distlock::__private::testing::zookeeper_node(&node);
            let Some(n) = limit_of.map(|n| n as usize) else {
                break;
            };
            limit = limit.min(n);
            if permits.len() >= limit {
                break;
            }
            let path = format!("{}/{node}", self.parent(name));
            if let Ok((data, stat)) = self.zk().await.get_data(&path).await {
                let data = String::from_utf8_lossy(&data).into_owned();
                permits.push((token.to_owned(), zk_ttl(&data, &stat)));
            }
        }
        permits
    }

    async fn delete(&self, name: &str) {
        for node in self.queue(name).await {
            let _ = self
                .zk()
                .await
                .delete(&format!("{}/{node}", self.parent(name)), None)
                .await;
        }
    }

    /// Deletes the queue and puts another owner's node (on the fixture's session) at its head.
    async fn overwrite(&self, name: &str, token: &str, ttl: Duration) {
        self.delete(name).await;
        let options = zookeeper_client::CreateMode::EphemeralSequential
            .with_acls(zookeeper_client::Acls::anyone_all());
        let data = format!(
            "holder=intruder\nlease_ms={}\nrenew=true\n",
            ttl.as_millis()
        );
        let zk = self.zk().await;
        // The lock's parent is a container node, which the server deletes once it has been
        // empty a while: emptied just now, it may go between the `mkdir` (which found it) and
        // the create. Made again then.
        let mut attempts = 0;
        loop {
            let _ = zk
                .mkdir(
                    &self.parent(name),
                    &zookeeper_client::CreateMode::Persistent
                        .with_acls(zookeeper_client::Acls::anyone_all()),
                )
                .await;
            let planted = zk
                .create(
                    &format!("{}/{token}-", self.parent(name)),
                    data.as_bytes(),
                    &options,
                )
                .await;
            match planted {
                Err(zookeeper_client::Error::NoNode) if attempts < 5 => attempts += 1,
                planted => {
                    planted.expect("plant another owner's node");
                    return;
                }
            }
        }
    }

    async fn slowed(&self, min: Duration, max: Duration) -> Slowed {
        let port = self.server.secure_port.unwrap_or(self.server.client_port);
        slowed_through(&self.url(), port, min, max).await
    }

    fn fencing_consecutive(&self) -> bool {
        false
    }
}

/// How long ZooKeeper would keep a node if its holder stopped now, from its data and stat:
/// what is left of an unrenewed lock's lease, or a renewed one's whole lease.
fn zk_ttl(data: &str, stat: &zookeeper_client::Stat) -> Option<Duration> {
    let field = |key: &str| {
        data.lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_owned)
    };
    let lease = Duration::from_millis(field("lease_ms")?.parse().ok()?);
    if field("renew").as_deref() == Some("false") {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let age = Duration::from_millis((now_ms - stat.ctime).max(0) as u64);
        Some(lease.saturating_sub(age))
    } else {
        Some(lease)
    }
}

/// A key prefix of this test's own on the binary's shared etcd member.
pub struct EtcdFixture {
    pub member: Server<super::etcd::EtcdMember>,
    pub prefix: String,
    inspector: std::sync::OnceLock<distlock::__private::testing::EtcdInspector>,
}

impl EtcdFixture {
    pub fn new() -> EtcdFixture {
        EtcdFixture::on(Server::Shared(super::etcd::EtcdMember::shared()))
    }

    /// On a member of this test's own.
    pub fn own() -> EtcdFixture {
        EtcdFixture::on(Server::Own(super::etcd::EtcdMember::start()))
    }

    /// On the binary's shared member that clients reach over mutual TLS (`etcds://`, the test
    /// CA and client certificate in the URL); the fixture looks through the plain port.
    pub fn tls() -> EtcdFixture {
        EtcdFixture::on(Server::Shared(super::etcd::EtcdMember::shared_tls()))
    }

    fn on(member: Server<super::etcd::EtcdMember>) -> EtcdFixture {
        EtcdFixture {
            member,
            prefix: unique("conformance"),
            inspector: std::sync::OnceLock::new(),
        }
    }

    /// A plain etcd client of the member (inside a Tokio runtime).
    pub fn etcd(&self) -> &distlock::__private::testing::EtcdInspector {
        self.inspector.get_or_init(|| {
            distlock::__private::testing::EtcdInspector::new(&format!(
                "127.0.0.1:{}",
                self.member.client_port
            ))
        })
    }

    /// The key prefix of lock `name`'s queue.
    pub fn queue(&self, name: &str) -> String {
        format!(
            "{}/{}",
            self.prefix,
            distlock::__private::testing::etcd_queue(name)
        )
    }

    /// The holder's key (the lowest create revision in the queue).
    pub async fn holder_key(&self, name: &str) -> Option<distlock::__private::testing::EtcdKey> {
        if name.len() > 4 * distlock::LockClient::MAX_KEY_LEN {
            // Longer than any lock name: no key can exist, and etcd would refuse the request.
            return None;
        }
        self.etcd().keys(&self.queue(name)).await.into_iter().next()
    }
}

/// The owner token of a queue key: its value's `token=` line (a key is named by its lease and
/// a slot, not by its token), or for a key of another writer, its name's last segment.
fn etcd_token(kv: &distlock::__private::testing::EtcdKey) -> String {
    kv.value
        .lines()
        .find_map(|line| line.strip_prefix("token="))
        .unwrap_or_else(|| kv.key.rsplit('/').next().unwrap_or_default())
        .to_owned()
}

#[async_trait::async_trait(?Send)]
impl Fixture for EtcdFixture {
    /// From the expiry the value starts with (unix ms, the writer's clock: this one's).
    async fn shared_ttl(&self, name: &str) -> Option<Duration> {
        let key = format!(
            "{}-shared/{}",
            self.prefix,
            distlock::__private::testing::etcd_queue(name)
        );
        dated_ttl(&self.etcd().value(&key).await?)
    }

    fn url(&self) -> String {
        self.member.url(&self.prefix)
    }

    async fn holder(&self, name: &str) -> Option<String> {
        Some(etcd_token(&self.holder_key(name).await?))
    }

    /// The readers at the head of the queue (keys `<queue><lease>[.<slot>]-r`, oldest first,
    /// before the first writer's key); etcd keeps them alive by their leases, not a TTL per
    /// reader.
    async fn readers(&self, name: &str) -> Vec<(String, Option<Duration>)> {
        let keys = self.etcd().keys(&self.queue(name)).await;
        keys.into_iter()
            .take_while(|kv| kv.key.ends_with("-r"))
            .map(|kv| (etcd_token(&kv), None))
            .collect()
    }

    /// The permits of the semaphore at the head of the queue: its first `n` keys
    /// (`<lease>[.<slot>]-p<n>`, `n` the limit); their leases are the client's, not one per
    /// key.
    async fn permits(&self, name: &str) -> Vec<(String, Option<Duration>)> {
        let keys = self.etcd().keys(&self.queue(name)).await;
        let mut permits: Vec<(String, Option<Duration>)> = Vec::new();
        let mut limit = usize::MAX;
        for kv in keys {
            let segment = kv.key.rsplit('/').next().unwrap_or_default().to_owned();
            let Some(n) = segment
                .rsplit_once("-p")
                .and_then(|(_, n)| n.parse::<usize>().ok())
            else {
                break;
            };
            let token = etcd_token(&kv);
            limit = limit.min(n);
            if permits.len() >= limit {
                break;
            }
            permits.push((token, None));
        }
        permits
    }

    /// How long etcd would keep the lock if its holder stopped now: what is left of an
    /// unrenewed lock's lease, or a renewed lock's whole lease (its keepalives keep it full).
    async fn ttl(&self, name: &str) -> Option<Duration> {
        let key = self.holder_key(name).await?;
        let field = |name: &str| {
            key.value
                .lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
                .map(str::to_owned)
        };
        let lease = Duration::from_millis(field("lease_ms")?.parse().ok()?);
        if field("renew").as_deref() == Some("false") {
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64;
            let joined: u64 = field("joined_unix_ms")?.parse().ok()?;
            Some(lease.saturating_sub(Duration::from_millis(now_ms.saturating_sub(joined))))
        } else {
            Some(lease)
        }
    }

    async fn delete(&self, name: &str) {
        self.etcd().delete_prefix(&self.queue(name)).await;
    }

    /// Deletes the queue and puts another owner's key (on a lease of its own) at its head.
    async fn overwrite(&self, name: &str, token: &str, ttl: Duration) {
        self.delete(name).await;
        let value = format!(
            "holder=intruder\nlease_ms={}\nrenew=true\n",
            ttl.as_millis()
        );
        self.etcd()
            .put_with_lease(&format!("{}{token}", self.queue(name)), &value, ttl)
            .await;
    }

    async fn slowed(&self, min: Duration, max: Duration) -> Slowed {
        let port = self.member.tls_port.unwrap_or(self.member.client_port);
        slowed_through(&self.url(), port, min, max).await
    }

    fn fencing_consecutive(&self) -> bool {
        false
    }
}

/// `nats://…?bucket=<unique>`: a bucket of this test's own on the binary's shared
/// `nats-server` (or on a server of its own, which a fault scenario may kill and restart).
pub struct NatsFixture {
    pub server: Server<super::nats::NatsServer>,
    pub bucket: String,
    client: tokio::sync::OnceCell<async_nats::jetstream::Context>,
    counted: tokio::sync::OnceCell<(async_nats::Client, std::sync::Arc<AtomicU64>)>,
}

impl NatsFixture {
    pub fn new() -> NatsFixture {
        NatsFixture::on(Server::Shared(super::nats::NatsServer::shared()))
    }

    /// On a server of this test's own.
    pub fn own() -> NatsFixture {
        NatsFixture::on(Server::Own(super::nats::NatsServer::start()))
    }

    fn on(server: Server<super::nats::NatsServer>) -> NatsFixture {
        NatsFixture {
            server,
            bucket: unique("conformance").replace(['.', ':'], "-"),
            client: tokio::sync::OnceCell::new(),
            counted: tokio::sync::OnceCell::new(),
        }
    }

    /// The fixture's own JetStream connection (made on first use, in the test's runtime).
    async fn js(&self) -> &async_nats::jetstream::Context {
        self.client
            .get_or_init(|| async {
                let client = async_nats::connect(format!("127.0.0.1:{}", self.server.port))
                    .await
                    .expect("the fixture's own connection to nats-server");
                async_nats::jetstream::new(client)
            })
            .await
    }

    fn subject(&self, name: &str) -> String {
        format!(
            "$KV.{}.{}",
            self.bucket,
            distlock::__private::testing::nats_key(name)
        )
    }

    /// The key's last message, if it is a put (a holder's token, or a table of places): its
    /// payload, what is left of its TTL, its server stamp (unix ms) and revision.
    async fn last_put(&self, name: &str) -> Option<(String, Duration, u64, u64)> {
        let stream = self
            .js()
            .await
            .get_stream(format!("KV_{}", self.bucket))
            .await
            .ok()?;
        let message = stream
            .get_last_raw_message_by_subject(&self.subject(name))
            .await
            .ok()?;
        let headers = &message.headers;
        if headers.get("KV-Operation").is_some()
            || headers
                .get(async_nats::header::NATS_MARKER_REASON)
                .is_some()
        {
            return None;
        }
        let ttl = headers
            .get(async_nats::header::NATS_MESSAGE_TTL)?
            .as_str()
            .trim_end_matches('s')
            .parse::<u64>()
            .ok()?;
        let written = Duration::from_nanos(message.time.unix_timestamp_nanos() as u64);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let left = (written + Duration::from_secs(ttl)).saturating_sub(now);
        Some((
            String::from_utf8_lossy(&message.payload).into_owned(),
            left,
            written.as_millis() as u64,
            message.sequence,
        ))
    }

    /// The live places of `name`'s table (token, kind, holds, what is left of it); `None` when
    /// the key is free or holds a bare token.
    async fn places(&self, name: &str) -> Option<Vec<(String, char, bool, Duration)>> {
        let (value, _, stamp, revision) = self.last_put(name).await?;
        let places = distlock::__private::testing::nats_table(&value, stamp, revision)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        Some(
            places
                .into_iter()
                .filter(|place| place.3 > now)
                .map(|(token, kind, holds, ends)| {
                    (token, kind, holds, Duration::from_millis(ends - now))
                })
                .collect(),
        )
    }

    /// How many messages clients published to the bucket's subjects (lock writes, refused ones
    /// included) since the first call, which subscribes to them and counts 0. A round trip on
    /// the counting connection first: what the server took before the call is counted.
    pub async fn publishes(&self) -> u64 {
        let (client, count) = self
            .counted
            .get_or_init(|| async {
                let client = async_nats::connect(format!("127.0.0.1:{}", self.server.port))
                    .await
                    .expect("the fixture's counting connection to nats-server");
                let mut seen = client
                    .subscribe(format!("$KV.{}.>", self.bucket))
                    .await
                    .expect("subscribe to the bucket's subjects");
                client
                    .flush()
                    .await
                    .expect("the subscription reached the server");
                let count = std::sync::Arc::new(AtomicU64::new(0));
                let counting = count.clone();
                tokio::spawn(async move {
                    use futures_util::StreamExt;
                    while seen.next().await.is_some() {
                        counting.fetch_add(1, Ordering::SeqCst);
                    }
                });
                (client, count)
            })
            .await;
        // The server routes a publish to subscribers before it reads this connection's PING.
        let _ = client.flush().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        count.load(Ordering::SeqCst)
    }

    /// Publishes to `name`'s key without expecting any revision.
    async fn publish(&self, name: &str, headers: async_nats::HeaderMap, payload: String) {
        self.js()
            .await
            .publish_with_headers(self.subject(name), headers, payload.into())
            .await
            .expect("publish")
            .await
            .expect("the bucket took the write");
    }
}

#[async_trait::async_trait(?Send)]
impl Fixture for NatsFixture {
    fn url(&self) -> String {
        self.server.url(&self.bucket)
    }

    /// The TTL left of the key of `lock-share:<name>` (whole seconds, from the server's stamp).
    async fn shared_ttl(&self, name: &str) -> Option<Duration> {
        self.ttl(&format!("lock-share:{name}")).await
    }

    /// The bare token, or the writer holding the key's table.
    async fn holder(&self, name: &str) -> Option<String> {
        if let Some(places) = self.places(name).await {
            return places
                .into_iter()
                .find(|(_, kind, holds, _)| *kind == 'W' && *holds)
                .map(|(token, ..)| token);
        }
        self.last_put(name).await.map(|(token, ..)| token)
    }

    /// What is left of the key's TTL (whole seconds, from the server's stamp).
    async fn ttl(&self, name: &str) -> Option<Duration> {
        self.last_put(name).await.map(|(_, ttl, ..)| ttl)
    }

    /// The readers' (or permits') places of the key's table that hold, longest first.
    async fn readers(&self, name: &str) -> Vec<(String, Option<Duration>)> {
        let mut readers: Vec<(String, Option<Duration>)> = self
            .places(name)
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, kind, holds, _)| *kind != 'W' && *holds)
            .map(|(token, _, _, left)| (token, Some(left)))
            .collect();
        readers.sort_by_key(|reader| std::cmp::Reverse(reader.1));
        readers
    }

    async fn anything_at(&self, name: &str) -> bool {
        self.last_put(name).await.is_some()
    }

    async fn delete(&self, name: &str) {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("KV-Operation", "DEL");
        headers.insert(async_nats::header::NATS_MESSAGE_TTL, "1s");
        self.publish(name, headers, String::new()).await;
    }

    async fn overwrite(&self, name: &str, token: &str, ttl: Duration) {
        let mut headers = async_nats::HeaderMap::new();
        let seconds = ttl.as_millis().div_ceil(1000).max(1);
        headers.insert(
            async_nats::header::NATS_MESSAGE_TTL,
            format!("{seconds}s").as_str(),
        );
        self.publish(name, headers, token.to_owned()).await;
    }

    async fn slowed(&self, min: Duration, max: Duration) -> Slowed {
        let port = self.server.port;
        slowed_through(&self.url(), port, min, max).await
    }

    /// Revisions are the bucket's stream sequence: every write (renewals, deletes, other
    /// keys) moves it on.
    fn fencing_consecutive(&self) -> bool {
        false
    }
}
