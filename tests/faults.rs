//! Safety under faults, one test per scenario and backend (RELIABILITY.md lists them):
//!
//! 1. the holder process is killed (`kill -9`): the next grant comes after the lease, never before;
//! 2. the server restarts empty while a lock is held: the guard reports the loss before its lease
//!    would have ended, and a new holder succeeds;
//! 3. the holder process is paused (SIGSTOP) past its lease, another process takes the lock and
//!    writes, the first resumes and writes: the fenced resource rejects the stale write;
//! 4. the holder's connection is blackholed past its lease: the guard declares the loss (on the
//!    monotonic clock) before the new holder's acquisition returns;
//! 5. a waiter's connection is cut while it waits and the holder releases: the waiter never
//!    believes it holds a lock it does not hold;
//! 6. after every exit path of an annotated function, and after runtime shutdown, no renewal is
//!    sent again (the server's command stats);
//! 7. the server dies mid-acquire, mid-renew and mid-release: each call fails within a bound,
//!    nothing panics, and once the server is back the lock works again.
//!
//! Backends: one `redis-server`, Redlock over three servers (a fault hits a majority: two), and a
//! three-master Redis Cluster (a fault hits the master that owns the key's slot). Processes are
//! copies of this test binary running a helper entry point.

mod support;

use std::time::Duration;

use distlock::fence::{FencedWrite, redis_fenced_set};
use distlock::{LockClient, LockError, distributed_lock};
use support::cluster::RedisCluster;
use support::fixture::{ClusterFixture, Fixture, RedisFixture, RedlockFixture};
use support::history::{self, Helper, Hold, check, now_ns};
use support::proxy::DelayProxy;
use support::store::{Conn, Store};
use support::{RedisServer, unique};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---------------------------------------------------------------------------------------------
// The servers of one backend, and the ones a fault hits.

enum Servers {
    Redis(RedisFixture),
    Redlock(RedlockFixture),
    Cluster(ClusterFixture),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Redis,
    Redlock,
    Cluster,
}

impl Servers {
    fn start(kind: Kind) -> Servers {
        match kind {
            Kind::Redis => Servers::Redis(RedisFixture::new()),
            Kind::Redlock => Servers::Redlock(RedlockFixture::new(3)),
            Kind::Cluster => {
                let fixture = ClusterFixture::new();
                for i in 0..fixture.cluster.nodes.len() {
                    // The other masters serve their slots while one is down.
                    let () = fixture.cluster.query(
                        i,
                        redis::cmd("CONFIG")
                            .arg("SET")
                            .arg("cluster-require-full-coverage")
                            .arg("no"),
                    );
                }
                Servers::Cluster(fixture)
            }
        }
    }

    fn url(&self) -> String {
        match self {
            Servers::Redis(f) => f.url(),
            Servers::Redlock(f) => f.url(),
            Servers::Cluster(f) => f.url(),
        }
    }

    fn fencing(&self) -> bool {
        !matches!(self, Servers::Redlock(_))
    }

    fn all(&self) -> &[RedisServer] {
        match self {
            Servers::Redis(f) => std::slice::from_ref(&f.server),
            Servers::Redlock(f) => &f.servers,
            Servers::Cluster(f) => &f.cluster.nodes,
        }
    }

    fn all_mut(&mut self) -> &mut [RedisServer] {
        match self {
            Servers::Redis(f) => std::slice::from_mut(&mut f.server),
            Servers::Redlock(f) => &mut f.servers,
            Servers::Cluster(f) => &mut f.cluster.nodes,
        }
    }

    fn cluster(&self) -> Option<&RedisCluster> {
        match self {
            Servers::Cluster(f) => Some(&f.cluster),
            _ => None,
        }
    }

    /// The servers a fault on lock `key` hits: the server; a majority of the Redlock nodes; the
    /// cluster master that owns the key's slot.
    fn victims(&self, key: &str) -> Vec<usize> {
        match self {
            Servers::Redis(_) => vec![0],
            Servers::Redlock(_) => vec![0, 1],
            Servers::Cluster(f) => {
                let slot = f.cluster.slot(&format!("{{lock:{key}}}"), 0);
                vec![f.cluster.owner_of(slot, 0)]
            }
        }
    }

    fn pause(&self, victims: &[usize]) {
        for &i in victims {
            self.all()[i].pause();
        }
    }

    fn kill(&mut self, victims: &[usize]) {
        for &i in victims {
            self.all_mut()[i].kill();
        }
    }

    /// Restarts the victims empty (a cluster node keeps its slot map in `nodes.conf`).
    fn restart(&mut self, victims: &[usize]) {
        for &i in victims {
            self.all_mut()[i].restart();
        }
        if let Some(cluster) = self.cluster() {
            for &i in victims {
                tokio::task::block_in_place(|| cluster.wait_until_ok(i, Duration::from_secs(20)));
            }
        }
    }

    async fn holder(&self, key: &str) -> Option<String> {
        let name = format!("lock:{key}");
        match self {
            Servers::Redis(f) => f.holder(&name).await,
            Servers::Redlock(f) => f.holder(&name).await,
            Servers::Cluster(f) => f.holder(&name).await,
        }
    }

    /// The lock's remaining TTL (on Redlock, the shortest among the nodes of the majority).
    async fn ttl(&self, key: &str) -> Duration {
        let name = format!("lock:{key}");
        match self {
            Servers::Redis(f) => f.ttl(&name).await,
            Servers::Redlock(f) => f.ttl(&name).await,
            Servers::Cluster(f) => f.ttl(&name).await,
        }
        .expect("the lock has a TTL")
    }

    /// Calls of the lock commands (SET, EVAL, EVALSHA, PEXPIRE) on every running server since
    /// the last reset.
    async fn lock_commands(&self) -> u64 {
        let mut total = 0;
        for server in self.all().iter().filter(|s| s.is_running()) {
            total += server
                .commands_calls(&["set", "eval", "evalsha", "pexpire"])
                .await;
        }
        total
    }

    async fn reset_stats(&self) {
        for server in self.all().iter().filter(|s| s.is_running()) {
            server.reset_stats().await;
        }
    }
}

/// The fenced resource: a hash in the examples' store (the server, the first Redlock node, or
/// the cluster), written through `distlock::fence`.
struct Data(Conn);

impl Data {
    async fn open(lock_url: &str) -> Data {
        match Store::open(lock_url, "fence").await.expect("data store") {
            Store::Redis { conn, .. } => Data(conn),
            Store::Memory(_)
            | Store::Postgres { .. }
            | Store::Mysql { .. }
            | Store::Zookeeper { .. }
            | Store::Etcd { .. } => {
                unreachable!("these fault tests run on Redis")
            }
        }
    }

    async fn fenced_set(&self, value: &str, token: u64) -> FencedWrite {
        match self.0.clone() {
            Conn::Single(mut conn) => redis_fenced_set(&mut conn, "resource", value, token).await,
            Conn::Cluster(mut conn) => redis_fenced_set(&mut conn, "resource", value, token).await,
        }
        .expect("fenced write")
    }

    async fn value(&self) -> Option<String> {
        self.0
            .query(redis::cmd("HGET").arg("resource").arg("value"))
            .await
            .expect("HGET")
    }
}

/// Asserts that the servers hold the lock `key` for `guard` (its owner token is stored).
async fn assert_holds(servers: &Servers, key: &str, guard: &distlock::LockGuard, what: &str) {
    let mine = distlock::__private::testing::owner_token(guard).to_owned();
    assert_eq!(servers.holder(key).await, Some(mine), "{what}");
}

/// A holder process: takes `key` and reports `token acquired_at owner`; in `fenced` mode it then
/// writes the fenced resource, waits for the file `write-again`, and writes again.
#[test]
fn holder_process() {
    let Some(dir) = history::helper_dir() else {
        return;
    };
    let var = history::helper_var;
    history::helper_runtime().block_on(async {
        let url = var("LOCK_URL");
        let fencing = var("FENCING") == "1";
        let client = LockClient::builder(url.as_str())
            .fencing(fencing)
            .response_timeout(ms(300))
            .build()
            .await
            .unwrap();
        let guard = client
            .lock(var("LOCK_KEY"))
            .lease(ms(var("LEASE_MS").parse().unwrap()))
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap();
        let token = guard.fencing_token();
        let line = format!(
            "{} {} {}",
            token.map_or("-".into(), |t| t.to_string()),
            now_ns(),
            distlock::__private::testing::owner_token(&guard)
        );
        history::write_file(&dir.join("acquired"), &line);
        if var("MODE") != "fenced" {
            std::future::pending::<()>().await;
        }
        let token = token.expect("fencing is on");
        let data = Data::open(&url).await;
        let first = data.fenced_set("written by the first holder", token).await;
        history::write_file(&dir.join("wrote1"), &format!("{first:?}"));
        history::read_when_there(&dir.join("write-again"), Duration::from_secs(60)).await;
        // The stale holder writes without asking whether it still holds the lock: the pause can
        // fall between any check and the write, so only the resource can refuse.
        let second = data.fenced_set("written by the stale holder", token).await;
        let told = tokio::time::timeout(Duration::from_secs(2), guard.lost())
            .await
            .is_ok();
        history::write_file(&dir.join("wrote2"), &format!("{second:?} lost={told}"));
    });
}

fn spawn_holder(servers: &Servers, key: &str, lease: Duration, mode: &str) -> Helper {
    let dir = history::scratch_dir("holder");
    let env = [
        ("LOCK_URL", servers.url()),
        ("LOCK_KEY", key.to_owned()),
        ("LEASE_MS", lease.as_millis().to_string()),
        ("FENCING", if servers.fencing() { "1" } else { "0" }.into()),
        ("MODE", mode.to_owned()),
    ];
    let mut helper = Helper::spawn("holder_process", &dir, &env);
    helper.owns_dir = true;
    helper
}

/// `(fencing token, acquired_at, owner token)` from a holder's `acquired` file.
async fn acquired(helper: &Helper) -> (Option<u64>, u64, String) {
    let line = helper.read("acquired", Duration::from_secs(30)).await;
    let parts: Vec<&str> = line.split(' ').collect();
    (
        parts[0].parse().ok(),
        parts[1].parse().unwrap(),
        parts[2].to_owned(),
    )
}

// ---------------------------------------------------------------------------------------------
// 1. kill -9 of the holder process.

async fn holder_killed(kind: Kind) {
    let servers = Servers::start(kind);
    let key = unique("killed");
    let lease = ms(1_000);
    let mut holder = spawn_holder(&servers, &key, lease, "hold");
    let (first_token, _, owner) = acquired(&holder).await;
    assert_eq!(servers.holder(&key).await, Some(owner));
    // Let the holder renew a few times, so the lease is the renewed one.
    tokio::time::sleep(ms(500)).await;
    let before_read = now_ns();
    let ttl = servers.ttl(&key).await;
    holder.signal(libc::SIGKILL);
    let killed_at = now_ns();
    let _ = holder.child.wait();

    let client = LockClient::builder(servers.url())
        .fencing(servers.fencing())
        .build()
        .await
        .unwrap();
    let guard = client
        .lock(key.as_str())
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let granted_at = now_ns();
    // Never before the lease the server held at the kill (it can only have been extended since
    // `before_read`); and soon after it, since the waiter retries when the TTL runs out.
    let lease_end = before_read + ttl.as_nanos() as u64;
    assert!(
        granted_at + 2_000_000 >= lease_end,
        "granted {} ms before the killed holder's lease ended",
        (lease_end - granted_at) / 1_000_000
    );
    let after_kill = Duration::from_nanos(granted_at - killed_at);
    assert!(
        after_kill < lease + ms(700),
        "granted {after_kill:?} after the kill"
    );
    if servers.fencing() {
        assert!(guard.fencing_token() > first_token);
    }
    assert_holds(&servers, &key, &guard, "the holder's token is stored").await;
    guard.release().await.unwrap();
    eprintln!(
        "{kind:?}: killed holder's lock granted again {after_kill:?} after the kill (TTL then {ttl:?})"
    );
}

// ---------------------------------------------------------------------------------------------
// 2. The server restarts empty while a lock is held.

async fn server_restarts_empty(kind: Kind) {
    let mut servers = Servers::start(kind);
    let key = unique("restart");
    let client = LockClient::builder(servers.url())
        .connect_timeout(ms(300))
        .response_timeout(ms(300))
        .build()
        .await
        .unwrap();
    let lease = ms(3_000);
    let guard = client
        .lock(key.as_str())
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(ms(200)).await;
    let victims = servers.victims(&key);
    let before_read = now_ns();
    let ttl = servers.ttl(&key).await;
    servers.kill(&victims);
    servers.restart(&victims);
    assert_eq!(servers.holder(&key).await, None, "restarted empty");
    tokio::time::timeout(lease, guard.lost())
        .await
        .expect("the holder is told within its lease");
    let told_at = now_ns();
    let lease_end = before_read + ttl.as_nanos() as u64;
    assert!(
        told_at < lease_end,
        "the loss was reported {} ms after the lease would have ended",
        (told_at - lease_end) / 1_000_000
    );
    let other = LockClient::connect(&servers.url()).await.unwrap();
    let next = other
        .lock(key.as_str())
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("a new holder succeeds");
    assert_holds(&servers, &key, &next, "the holder's token is stored").await;
    assert!(
        guard.release().await.is_err(),
        "the old holder cannot release"
    );
    next.release().await.unwrap();
    eprintln!(
        "{kind:?}: loss reported {} ms before the lease would have ended",
        (lease_end - told_at) / 1_000_000
    );
}

// ---------------------------------------------------------------------------------------------
// 3. The holder is paused past its lease; the fenced resource rejects its stale write.

async fn paused_holder_is_fenced_off(kind: Kind) {
    let servers = Servers::start(kind);
    let key = unique("paused");
    let lease = ms(500);
    let holder = spawn_holder(&servers, &key, lease, "fenced");
    let (stale_token, _, _) = acquired(&holder).await;
    let stale_token = stale_token.expect("fencing token");
    assert_eq!(
        holder.read("wrote1", Duration::from_secs(10)).await,
        "Written"
    );

    holder.signal(libc::SIGSTOP);
    let client = LockClient::builder(servers.url())
        .fencing(true)
        .build()
        .await
        .unwrap();
    let guard = client
        .lock(key.as_str())
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let token = guard.fencing_token().unwrap();
    assert!(token > stale_token);
    let data = Data::open(&servers.url()).await;
    assert_eq!(
        data.fenced_set("written by the new holder", token).await,
        FencedWrite::Written
    );

    holder.signal(libc::SIGCONT);
    history::write_file(&holder.dir.join("write-again"), "go");
    let outcome = holder.read("wrote2", Duration::from_secs(10)).await;
    assert_eq!(
        outcome,
        format!("Stale {{ highest: {token} }} lost=true"),
        "the stale write must be refused, and the paused holder told it lost the lock"
    );
    assert_eq!(
        data.value().await.as_deref(),
        Some("written by the new holder")
    );
    guard.release().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 4. The holder's connection is blackholed past its lease.

/// Proxies in front of every server, and the URL that goes through them.
async fn proxied(servers: &Servers) -> (Vec<DelayProxy>, String) {
    let mut proxies = Vec::new();
    for server in servers.all() {
        proxies.push(DelayProxy::start(server.port()).await);
    }
    let nodes: Vec<String> = proxies
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.port()))
        .collect();
    let url = match servers {
        Servers::Redis(_) => format!("redis://{}", nodes[0]),
        Servers::Redlock(_) => format!("redlock://{}", nodes.join(",")),
        Servers::Cluster(_) => unreachable!("cluster nodes announce their own addresses"),
    };
    (proxies, url)
}

async fn blackholed_holder(kind: Kind) {
    let servers = Servers::start(kind);
    let (proxies, url) = proxied(&servers).await;
    let key = unique("blackholed");
    // The holder's margin is the drift allowance (1 % + 2 ms = 22 ms) plus the waiter's retry
    // jitter: a longer lease keeps a busy machine's scheduling delays inside it.
    let lease = ms(2_000);
    let holder = LockClient::builder(url.as_str())
        .response_timeout(ms(200))
        .connect_timeout(ms(200))
        .build()
        .await
        .unwrap();
    let guard = holder
        .lock(key.as_str())
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(ms(100)).await;
    let before_read = now_ns();
    let ttl = servers.ttl(&key).await;
    for proxy in &proxies {
        proxy.set_blackhole(true);
    }
    let lost = guard.lost();
    let told = tokio::spawn(async move {
        lost.await;
        now_ns()
    });
    let other = LockClient::connect(&servers.url()).await.unwrap();
    let next = other
        .lock(key.as_str())
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let granted_at = now_ns();
    let told_at = tokio::time::timeout(ms(100), told)
        .await
        .expect("the holder was told before the new grant")
        .unwrap();
    assert!(
        told_at < granted_at,
        "lost reported {} µs after the new grant",
        (told_at - granted_at) / 1_000
    );
    let lease_end = before_read + ttl.as_nanos() as u64;
    assert!(
        granted_at + 2_000_000 >= lease_end,
        "granted before the lease ended"
    );
    for proxy in &proxies {
        proxy.set_blackhole(false);
    }
    let err = guard.release().await.unwrap_err();
    assert!(
        err.is_lost() || matches!(err, LockError::Backend { .. }),
        "{err}"
    );
    assert_holds(&servers, &key, &next, "the new holder's lock is intact").await;
    next.release().await.unwrap();
    eprintln!(
        "{kind:?}: blackholed holder told {} ms before the new grant",
        (granted_at - told_at) / 1_000_000
    );
}

// ---------------------------------------------------------------------------------------------
// 5. A waiter's connection is cut while it waits.

async fn waiter_cut_off(kind: Kind) {
    let servers = Servers::start(kind);
    let fencing = servers.fencing();
    let key = unique("cut");
    let (proxies, waiter_url) = match kind {
        Kind::Cluster => (Vec::new(), servers.url()),
        _ => proxied(&servers).await,
    };
    let direct = LockClient::builder(servers.url())
        .fencing(fencing)
        .build()
        .await
        .unwrap();
    let waiter_client = LockClient::builder(waiter_url.as_str())
        .fencing(fencing)
        .response_timeout(ms(300))
        .connect_timeout(ms(300))
        .build()
        .await
        .unwrap();

    let first = direct
        .lock(key.as_str())
        .lease(ms(5_000))
        .acquire()
        .await
        .unwrap();
    let first_at = now_ns();
    let waiting = tokio::spawn({
        let key = key.clone();
        async move {
            let result = waiter_client
                .lock(key.as_str())
                .wait(Duration::from_secs(8))
                .acquire()
                .await;
            (result, now_ns())
        }
    });
    tokio::time::sleep(ms(150)).await;
    // Cut every connection of the waiter (for the cluster: every client connection of every
    // node, the holders' included) and keep it off for a while.
    match kind {
        Kind::Cluster => {
            for i in 0..servers.all().len() {
                for kind in ["normal", "pubsub"] {
                    let _: i64 = servers
                        .cluster()
                        .unwrap()
                        .query(i, redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg(kind));
                }
            }
        }
        _ => {
            for proxy in &proxies {
                proxy.cut(ms(400));
            }
        }
    }
    tokio::time::sleep(ms(50)).await;
    // The holder releases while the waiter is cut off, and a third client takes the lock at
    // once, holds it for a while, and releases.
    let first_token = first.fencing_token();
    let first_released = now_ns();
    first.release().await.unwrap();
    let mut holds = vec![Hold {
        key: key.clone(),
        holder: "first".into(),
        token: first_token,
        acquired_at: first_at,
        released_at: first_released,
    }];
    // Through the proxy the waiter stays cut off for 400 ms, so this is free; in the cluster
    // the waiter reconnects at once and may win first (then this one is refused).
    match direct
        .lock(key.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await
    {
        Ok(second) => {
            let second_at = now_ns();
            tokio::time::sleep(ms(500)).await;
            holds.push(Hold {
                key: key.clone(),
                holder: "second".into(),
                token: second.fencing_token(),
                acquired_at: second_at,
                released_at: now_ns(),
            });
            second.release().await.unwrap();
        }
        Err(err) if err.is_timeout() && kind == Kind::Cluster => {}
        Err(err) => panic!("the lock is free while the waiter is cut off: {err}"),
    }

    let (result, returned_at) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter returns")
        .unwrap();
    match result {
        Ok(guard) => {
            // It believes it holds the lock: the server must agree, and its hold must not
            // overlap the others.
            assert_holds(&servers, &key, &guard, "the waiter holds what it thinks").await;
            holds.push(Hold {
                key: key.clone(),
                holder: "waiter".into(),
                token: guard.fencing_token(),
                acquired_at: returned_at,
                released_at: now_ns(),
            });
            guard.release().await.unwrap();
        }
        Err(err) => {
            // It gave up: it must say so, and leave nothing behind.
            assert!(
                matches!(err, LockError::Backend { .. } | LockError::Timeout { .. }),
                "{err}"
            );
            assert!(
                support::eventually(ms(2_000), || async { servers.holder(&key).await.is_none() })
                    .await,
                "the waiter left a lock behind"
            );
        }
    }
    let summary = check(&holds).unwrap_or_else(|violation| panic!("{violation}"));
    eprintln!(
        "{kind:?}: cut-off waiter: {} holds, no overlap",
        summary.holds
    );
}

// ---------------------------------------------------------------------------------------------
// 6. No renewal after any exit path of an annotated function, or after runtime shutdown.

#[derive(Clone, Copy, Debug)]
enum Exit {
    Return,
    Error,
    Panic,
    Forever,
}

/// Lease 300 ms: renewed every 100 ms while the body runs.
#[distributed_lock(key = "exit:<path>", lease = "300ms", wait = "5s")]
async fn guarded(path: &str, how: Exit) -> Result<(), LockError> {
    tokio::time::sleep(ms(350)).await;
    match how {
        Exit::Return => Ok(()),
        Exit::Error => {
            let failed: Result<(), LockError> = Err(LockError::Config("the body failed".into()));
            failed?;
            unreachable!()
        }
        Exit::Panic => panic!("the body panics"),
        Exit::Forever => std::future::pending().await,
    }
}

const EXIT_PATHS: [&str; 5] = ["return", "error", "panic", "cancel", "shutdown"];

/// Runs each exit path in turn; after each it writes `done-<path>` and waits for `next-<path>`.
#[test]
fn exit_paths_process() {
    let Some(dir) = history::helper_dir() else {
        return;
    };
    let url = history::helper_var("LOCK_URL");
    let runtime = history::helper_runtime();
    let step = |path: &str| {
        history::write_file(&dir.join(format!("done-{path}")), "done");
        let next = dir.join(format!("next-{path}"));
        while !next.exists() {
            std::thread::sleep(ms(2));
        }
    };
    runtime.block_on(async {
        distlock::init(LockClient::connect(&url).await.unwrap()).unwrap();
    });
    let result = runtime.block_on(guarded("return", Exit::Return));
    assert!(result.is_ok());
    step("return");
    let result = runtime.block_on(guarded("error", Exit::Error));
    assert!(matches!(result, Err(LockError::Config(_))));
    step("error");
    let result = runtime.block_on(runtime.spawn(guarded("panic", Exit::Panic)));
    assert!(result.unwrap_err().is_panic());
    step("panic");
    let result = runtime
        .block_on(async { tokio::time::timeout(ms(350), guarded("cancel", Exit::Forever)).await });
    assert!(result.is_err(), "cancelled");
    step("cancel");
    runtime.spawn(guarded("shutdown", Exit::Forever));
    runtime.block_on(async { tokio::time::sleep(ms(350)).await });
    runtime.shutdown_timeout(ms(100));
    step("shutdown");
}

async fn no_renewal_after_exit(kind: Kind) {
    let servers = Servers::start(kind);
    let dir = history::scratch_dir("exit");
    let _helper = Helper::spawn("exit_paths_process", &dir, &[("LOCK_URL", servers.url())]);
    let mut report = Vec::new();
    for path in EXIT_PATHS {
        history::read_when_there(&dir.join(format!("done-{path}")), Duration::from_secs(30)).await;
        let during = servers.lock_commands().await;
        // Acquisition, and renewals every 100 ms for 350 ms, went to the servers: the counter
        // below can see commands.
        assert!(
            during >= 3,
            "{path}: only {during} lock commands while the body ran"
        );
        tokio::time::sleep(ms(50)).await; // a background release (panic, cancel) lands
        servers.reset_stats().await;
        tokio::time::sleep(ms(600)).await; // six renewal intervals
        let after = servers.lock_commands().await;
        assert_eq!(
            after, 0,
            "{path}: {after} lock commands after the function exited"
        );
        let name = format!("exit:{path}");
        assert!(
            support::eventually(ms(400), || async { servers.holder(&name).await.is_none() }).await,
            "{path}: the lock is still held"
        );
        report.push(format!("{path}: {during} commands while running, 0 after"));
        servers.reset_stats().await;
        history::write_file(&dir.join(format!("next-{path}")), "next");
    }
    eprintln!("{kind:?}: {}", report.join("; "));
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------
// 7. The server dies mid-acquire, mid-renew and mid-release.

async fn server_dies_mid_call(kind: Kind) {
    let mut servers = Servers::start(kind);
    let client = LockClient::builder(servers.url())
        .connect_timeout(ms(300))
        .response_timeout(ms(300))
        .build()
        .await
        .unwrap();
    let bound = Duration::from_secs(4);
    let mut report = Vec::new();

    // Mid-acquire: the request is sent to a hung server, which then dies.
    let key = unique("mid-acquire");
    let victims = servers.victims(&key);
    servers.pause(&victims);
    let started = std::time::Instant::now();
    let acquiring = tokio::spawn({
        let (client, key) = (client.clone(), key.clone());
        async move { client.lock(key.as_str()).wait(ms(1_000)).acquire().await }
    });
    tokio::time::sleep(ms(50)).await;
    servers.kill(&victims);
    let result = tokio::time::timeout(bound, acquiring)
        .await
        .expect("acquire returns within the bound")
        .expect("no panic");
    let err = result.expect_err("nothing to acquire from a dead server");
    assert_eq!(err.key(), Some(key.as_str()), "{err}");
    report.push(format!("acquire: {:?} ({err})", started.elapsed()));
    servers.restart(&victims);
    works_again(&servers, &client, &key).await;

    // Mid-renew: the renewal goes to a hung server, which then dies.
    let key = unique("mid-renew");
    let victims = servers.victims(&key);
    let lease = ms(900);
    let guard = client
        .lock(key.as_str())
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(ms(200)).await;
    servers.pause(&victims); // the renewal due at 300 ms hangs
    tokio::time::sleep(ms(200)).await;
    servers.kill(&victims);
    tokio::time::timeout(lease, guard.lost())
        .await
        .expect("the holder is told within its lease");
    let started = std::time::Instant::now();
    let release = tokio::time::timeout(bound, guard.release())
        .await
        .expect("release returns within the bound");
    assert!(release.is_err(), "a lost lock cannot be released cleanly");
    report.push(format!(
        "renew: lost in time, release {:?}",
        started.elapsed()
    ));
    servers.restart(&victims);
    works_again(&servers, &client, &key).await;

    // Mid-release: the release goes to a hung server, which then dies.
    let key = unique("mid-release");
    let victims = servers.victims(&key);
    let guard = client
        .lock(key.as_str())
        .lease(ms(3_000))
        .acquire()
        .await
        .unwrap();
    servers.pause(&victims);
    let started = std::time::Instant::now();
    let releasing = tokio::spawn(guard.release());
    tokio::time::sleep(ms(50)).await;
    servers.kill(&victims);
    let result = tokio::time::timeout(bound, releasing)
        .await
        .expect("release returns within the bound")
        .expect("no panic");
    let err = result.expect_err("a release the server never confirmed is an error");
    assert_eq!(err.key(), Some(key.as_str()), "{err}");
    report.push(format!("release: {:?} ({err})", started.elapsed()));
    servers.restart(&victims);
    works_again(&servers, &client, &key).await;
    eprintln!("{kind:?}: {}", report.join("; "));
}

/// After the restart the same client takes and gives back the lock, and the server saw it.
async fn works_again(servers: &Servers, client: &LockClient, key: &str) {
    let guard = client
        .lock(key)
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap_or_else(|err| panic!("{key}: the lock works again after the restart: {err}"));
    assert_holds(servers, key, &guard, "the holder's token is stored").await;
    guard.release().await.unwrap();
    assert_eq!(servers.holder(key).await, None);
}

// ---------------------------------------------------------------------------------------------
// 0. The harness itself: nothing a test starts outlives its test binary.

/// A test binary that starts servers (one of its own, the binary's shared one) and a helper
/// process of its own, writes their pids, then dies without running a destructor: aborted, or
/// waiting to be killed with SIGKILL.
#[test]
fn process_starter_process() {
    let Some(dir) = history::helper_dir() else {
        return;
    };
    if std::env::var_os("NESTED").is_some() {
        history::write_file(&dir.join("nested"), &std::process::id().to_string());
        loop {
            std::thread::park();
        }
    }
    let own = RedisServer::start();
    let shared = RedisServer::shared();
    let nested = Helper::spawn("process_starter_process", &dir, &[("NESTED", "1".into())]);
    history::helper_runtime().block_on(async {
        history::read_when_there(&dir.join("nested"), Duration::from_secs(30)).await;
    });
    let pids = [own.pid(), shared.pid(), nested.pid() as u32];
    let line: Vec<String> = pids.iter().map(u32::to_string).collect();
    history::write_file(&dir.join("pids"), &line.join(" "));
    history::helper_runtime().block_on(async {
        history::read_when_there(&dir.join("die"), Duration::from_secs(60)).await;
    });
    if history::helper_var("MODE") == "abort" {
        std::process::abort();
    }
    loop {
        std::thread::park();
    }
}

/// Whether process `pid` still runs (a zombie waiting to be reaped does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat.rsplit(')').next().unwrap_or("").trim_start();
        !state.starts_with('Z') && !state.starts_with('X')
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_and_helpers_die_with_their_test_binary() {
    for mode in ["abort", "kill"] {
        let dir = history::scratch_dir("orphans");
        let mut starter = Helper::spawn(
            "process_starter_process",
            &dir,
            &[("MODE", mode.to_owned())],
        );
        starter.owns_dir = true;
        let line = starter.read("pids", Duration::from_secs(30)).await;
        let pids: Vec<u32> = line.split(' ').map(|p| p.parse().unwrap()).collect();
        assert!(
            pids.iter().all(|&pid| running(pid)),
            "{mode}: started {pids:?}"
        );
        if mode == "kill" {
            starter.signal(libc::SIGKILL);
        } else {
            history::write_file(&dir.join("die"), "die");
        }
        let gone = support::eventually(Duration::from_secs(5), || async {
            pids.iter().all(|&pid| !running(pid))
        })
        .await;
        assert!(
            gone,
            "{mode}: still running after their test binary died: {:?}",
            pids.iter().filter(|&&pid| running(pid)).collect::<Vec<_>>()
        );
    }
}

// ---------------------------------------------------------------------------------------------

macro_rules! scenarios {
    ($($name:ident: $scenario:ident => [$($backend:ident),*];)*) => {
        $(
            mod $name {
                $(
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    #[allow(non_snake_case)]
                    async fn $backend() {
                        super::$scenario(super::Kind::$backend).await;
                    }
                )*
            }
        )*
    };
}

scenarios! {
    s1_holder_killed: holder_killed => [Redis, Redlock, Cluster];
    s2_server_restarts_empty: server_restarts_empty => [Redis, Redlock, Cluster];
    s3_paused_holder_is_fenced_off: paused_holder_is_fenced_off => [Redis, Cluster];
    s4_blackholed_holder: blackholed_holder => [Redis, Redlock];
    s5_waiter_cut_off: waiter_cut_off => [Redis, Redlock, Cluster];
    s6_no_renewal_after_exit: no_renewal_after_exit => [Redis, Redlock, Cluster];
    s7_server_dies_mid_call: server_dies_mid_call => [Redis, Redlock, Cluster];
}
