//! What the fault suite (`tests/it/faults.rs`) needs of a backend beyond the conformance
//! [`Fixture`]: servers of the test's own to pause, kill and restart, the servers a fault hits,
//! counters of what reaches them, and the bounds its lease promise allows; and which scenario
//! applies to which backend, from which RELIABILITY.md's fault table is generated.

use std::time::Duration;

use super::RedisServer;
use super::fixture::EtcdFixture;
use super::fixture::NatsFixture;
use super::fixture::ZookeeperFixture;
use super::fixture::{
    AdvisoryFixture, ClusterFixture, Fixture, MysqlFixture, NamedFixture, PostgresFixture,
    RedisFixture, RedlockFixture, SentinelFixture,
};

/// The backends, in the order of RELIABILITY.md's columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    Redis,
    Redlock,
    Cluster,
    Sentinel,
    Postgres,
    /// `postgres://` through PgBouncer (transaction mode), the server behind it faulted.
    BehindPgBouncer,
    /// `postgres://` through PgBouncer, PgBouncer itself faulted (the server runs on).
    PgBouncerItself,
    Advisory,
    Mysql,
    Named,
    Zookeeper,
    Etcd,
    Nats,
    Memory,
}

impl Backend {
    pub const ALL: [Backend; 14] = [
        Backend::Redis,
        Backend::Redlock,
        Backend::Cluster,
        Backend::Sentinel,
        Backend::Postgres,
        Backend::BehindPgBouncer,
        Backend::PgBouncerItself,
        Backend::Advisory,
        Backend::Mysql,
        Backend::Named,
        Backend::Zookeeper,
        Backend::Etcd,
        Backend::Nats,
        Backend::Memory,
    ];

    /// The column header, and the module of the suite's tests (`faults <module>::`).
    pub fn names(self) -> (&'static str, &'static str) {
        match self {
            Backend::Redis => ("Redis", "redis"),
            Backend::Redlock => ("Redlock", "redlock"),
            Backend::Cluster => ("Cluster", "cluster"),
            Backend::Sentinel => ("Sentinel", "sentinel"),
            Backend::Postgres => ("PostgreSQL", "postgres"),
            Backend::BehindPgBouncer => ("PostgreSQL via PgBouncer", "behind_pgbouncer"),
            Backend::PgBouncerItself => ("PgBouncer itself", "pgbouncer_itself"),
            Backend::Advisory => ("PostgreSQL advisory", "advisory"),
            Backend::Mysql => ("MariaDB", "mysql"),
            Backend::Named => ("MariaDB named", "named"),
            Backend::Zookeeper => ("ZooKeeper", "zookeeper"),
            Backend::Etcd => ("etcd", "etcd"),
            Backend::Nats => ("NATS", "nats"),
            Backend::Memory => ("memory", "memory"),
        }
    }

    /// The store's name in distlock's table of what each store can do
    /// (`distlock::__private::store_supports`).
    pub fn store(self) -> &'static str {
        match self {
            Backend::BehindPgBouncer | Backend::PgBouncerItself => "pgbouncer",
            other => other.names().1,
        }
    }

    /// The backend whose module of the suite's tests is `module`.
    pub fn of_module(module: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.names().1 == module)
    }

    /// The PostgreSQL lock table, directly or through PgBouncer.
    fn is_postgres_table(self) -> bool {
        matches!(
            self,
            Backend::Postgres | Backend::BehindPgBouncer | Backend::PgBouncerItself
        )
    }

    fn is_redis(self) -> bool {
        matches!(
            self,
            Backend::Redis | Backend::Redlock | Backend::Cluster | Backend::Sentinel
        )
    }
}

/// The fault scenarios, each a function of the fixture in `tests/it/faults.rs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scenario {
    HolderKilled,
    PausedHolderIsFencedOff,
    BlackholedHolder,
    WaiterCutOff,
    ServerRestartsEmpty,
    ServerRestartsWithItsData,
    ServerDiesMidCall,
    NoRenewalAfterExit,
    LeaderThenMajorityLost,
    ReaderKilled,
    PausedReaderLosesItsShare,
    PermitHolderKilled,
    PausedPermitHolderLosesItsPermit,
    SetHolderKilled,
    PausedHolderKeptForItsLockDelay,
}

/// Why no process, server or network fault applies to `memory://`.
const ONE_PROCESS: &str = "lives in one process: no server, network or other process to fault";

impl Scenario {
    pub const ALL: [Scenario; 15] = [
        Scenario::HolderKilled,
        Scenario::PausedHolderIsFencedOff,
        Scenario::BlackholedHolder,
        Scenario::WaiterCutOff,
        Scenario::ServerRestartsEmpty,
        Scenario::ServerRestartsWithItsData,
        Scenario::ServerDiesMidCall,
        Scenario::NoRenewalAfterExit,
        Scenario::LeaderThenMajorityLost,
        Scenario::ReaderKilled,
        Scenario::PausedReaderLosesItsShare,
        Scenario::PermitHolderKilled,
        Scenario::PausedPermitHolderLosesItsPermit,
        Scenario::SetHolderKilled,
        Scenario::PausedHolderKeptForItsLockDelay,
    ];

    /// The test's name (in every backend's module of `tests/it/faults.rs`).
    pub fn test_name(self) -> &'static str {
        match self {
            Scenario::HolderKilled => "s1_holder_killed",
            Scenario::PausedHolderIsFencedOff => "s2_paused_holder_is_fenced_off",
            Scenario::BlackholedHolder => "s3_blackholed_holder",
            Scenario::WaiterCutOff => "s4_waiter_cut_off",
            Scenario::ServerRestartsEmpty => "s5_server_restarts_empty",
            Scenario::ServerRestartsWithItsData => "s6_server_restarts_with_its_data",
            Scenario::ServerDiesMidCall => "s7_server_dies_mid_call",
            Scenario::NoRenewalAfterExit => "s8_no_renewal_after_exit",
            Scenario::LeaderThenMajorityLost => "s9_leader_then_majority_lost",
            Scenario::ReaderKilled => "s10_reader_killed",
            Scenario::PausedReaderLosesItsShare => "s11_paused_reader_loses_its_share",
            Scenario::PermitHolderKilled => "s12_permit_holder_killed",
            Scenario::PausedPermitHolderLosesItsPermit => {
                "s13_paused_permit_holder_loses_its_permit"
            }
            Scenario::SetHolderKilled => "s14_holder_of_two_keys_killed",
            Scenario::PausedHolderKeptForItsLockDelay => {
                "s15_paused_holder_kept_for_its_lock_delay"
            }
        }
    }

    /// The scenario whose test is named `name`.
    pub fn of_test(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.test_name() == name)
    }

    /// Whether the scenario faults the servers (pauses, kills or restarts them) rather than
    /// the clients' processes or their network.
    pub fn faults_the_server(self) -> bool {
        matches!(
            self,
            Scenario::ServerRestartsEmpty
                | Scenario::ServerRestartsWithItsData
                | Scenario::ServerDiesMidCall
                | Scenario::LeaderThenMajorityLost
        )
    }

    /// `(setup, fault, asserted)`: the row of RELIABILITY.md's table.
    pub fn row(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Scenario::HolderKilled => (
                "A holder process, lease 1 s (ZooKeeper, etcd: 2 s), renewing",
                "`kill -9` of the holder",
                "the server held the holder's token; the next grant comes no earlier than the \
                 expiry the server held at the kill (Redis, SQL: the TTL read just before, less \
                 1 % + 2 ms for the server's clock; ZooKeeper, etcd: the lease less the 2/5 a heartbeat may be behind) \
                 and within lease + 700 ms (ZooKeeper, etcd: + 3 s; PostgreSQL advisory: \
                 freed at the kill, with the holder's connection, and granted within the same \
                 bound); its fencing token is larger; the server holds the new owner",
            ),
            Scenario::PausedHolderIsFencedOff => (
                "A holder process with fencing (lease 500 ms; ZooKeeper, etcd: 1 s) has written \
                 the resource",
                "SIGSTOP past the lease; another client takes the lock (token larger) and writes \
                 the resource; SIGCONT; the first writes again, plain and fenced, without asking",
                "the stale **plain write lands** over the new holder's; its **fenced write is \
                 refused** (`fence::REDIS_FENCED_SET`; `fence::SQL_FENCED_UPDATE`, `?` \
                 placeholders on MariaDB; an etcd transaction comparing the stored token; a \
                 ZooKeeper version-checked write; a NATS update at the revision whose token was \
                 compared) and the resource keeps the new holder's \
                 value; the resumed holder is told its lock was lost",
            ),
            Scenario::BlackholedHolder => (
                "Holder behind TCP proxies (every node), lease 2 s",
                "the proxies drop everything, connections stay open (blackhole)",
                "the guard declares the loss (monotonic clock) before another client's \
                 acquisition returns, and that grant comes after the lease the server held \
                 (bounds as in row 1); its token is larger; the old guard's release fails; the \
                 new holder's lock is intact",
            ),
            Scenario::WaiterCutOff => (
                "A waiter (behind proxies) waits for a held lock",
                "every connection of the waiter is cut and refused for 400 ms (Cluster: \
                 `CLIENT KILL` of every client on every node); meanwhile the holder releases and \
                 a third client takes and releases the lock",
                "the waiter either holds the lock and the server agrees (its token is stored), \
                 granted < 3 s after the lock was free (not a lease later: a waiter that cannot \
                 listen asks again every second), or returns an error and leaves nothing behind; \
                 the checker finds no overlap among the holds",
            ),
            Scenario::ServerRestartsEmpty => (
                "Lease 3 s, held",
                "the server (Redlock: 2 of 3 nodes; Cluster: the key's master) is killed and \
                 restarted empty",
                "the guard reports the loss *before* the lease would have ended; a new client \
                 then takes the lock; the old guard cannot release it",
            ),
            Scenario::ServerRestartsWithItsData => (
                "Lease 8 s, held; another client asked once (its waiting set up)",
                "the server is killed (`kill -9`) and restarted with its data",
                "the lock is still held by the same owner a full lease after the kill (renewal \
                 went on with the restarted server), another client still cannot take it, the \
                 guard never reported a loss; a waiter is granted the lock < 2 s after the \
                 release (woken by it, not by the lease)",
            ),
            Scenario::ServerDiesMidCall => (
                "Client with 300 ms connect/response timeouts",
                "the server (majority; key's master) is SIGSTOPped with a call in flight, then \
                 killed: mid-acquire, mid-renew, mid-release",
                "each call returns an error naming the key within 4 s; mid-renew the guard is \
                 told lost within its lease; nothing panics; after a restart the same client \
                 takes and releases the lock and the server saw it",
            ),
            Scenario::NoRenewalAfterExit => (
                "An annotated function (lease 300 ms, renewed every 100 ms) in a helper process",
                "exit by return, `Err` through `?`, panic, cancellation (future dropped), \
                 runtime shutdown",
                "the server saw the lock's commands while the body ran; after each exit nothing \
                 writes to the server for 600 ms (Redis: `INFO commandstats`; PostgreSQL: the \
                 statement log; MariaDB: `Com_insert/update/delete`; ZooKeeper: the zxid; etcd: \
                 the revision; NATS: the publishes to the bucket's subjects) and the key is gone; after the runtime's shutdown no renewal \
                 either: the session is closed / the lease revoked, and no keepalive arrives",
            ),
            Scenario::LeaderThenMajorityLost => (
                "Three servers (ZooKeeper ensemble, etcd cluster), a lock held (lease 6 s; etcd: \
                 5 s)",
                "the leader killed; then a second server (no majority)",
                "a new leader is elected; the held lock is still held a full lease after the kill \
                 (another client's `try_acquire` gets `None`, the guard never reported lost) and \
                 new locks are granted with larger tokens; without a majority an acquisition \
                 with `wait = 3s` fails within the wait + twice the response timeout with a \
                 backend error naming the backend, and the holder is told lost within its lease",
            ),
            Scenario::ReaderKilled => (
                "A reader process (`.read()`), lease 1 s (ZooKeeper, etcd: 2 s), renewing",
                "`kill -9` of the reader; a writer waits",
                "the server held the reader's share under its token; the writer is granted no \
                 earlier than the expiry the server held at the kill and within lease + 700 ms \
                 (ZooKeeper, etcd: + 3 s), with a larger fencing token; the server holds the \
                 writer (row 1 is the same for a killed writer)",
            ),
            Scenario::PausedReaderLosesItsShare => (
                "A reader process, lease 500 ms (ZooKeeper, etcd: 1 s), renewing",
                "SIGSTOP past the lease; a writer takes the lock; SIGCONT",
                "the writer is granted no earlier than the expiry the server held at the pause; \
                 the server holds the writer; the resumed reader is told its lock was lost \
                 (`guard.lost()`) within 2 s",
            ),
            Scenario::PermitHolderKilled => (
                "A process holding the one permit of a semaphore (`client.semaphore(k, 1)`), \
                 lease 1 s (ZooKeeper, etcd: 2 s), renewing",
                "`kill -9` of the holder; another process waits for a permit",
                "the server held the holder's permit under its token; the waiter's permit is \
                 granted no earlier than the expiry the server held at the kill and within \
                 lease + 700 ms (ZooKeeper, etcd: + 3 s), with a larger fencing token; the \
                 server holds the waiter's permit, and only it",
            ),
            Scenario::SetHolderKilled => (
                "A process holding two keys at once (`client.lock_all([k1, k2])`), lease 1 s \
                 (ZooKeeper, etcd: 2 s), renewing",
                "`kill -9` of the holder; another process waits for both keys",
                "the server held both keys for the holder; the waiter's set is granted no \
                 earlier than the expiry the server held at the kill and within lease + 700 ms \
                 (ZooKeeper, etcd: + 3 s), with larger fencing tokens; the server holds both \
                 keys for the waiter",
            ),
            Scenario::PausedHolderKeptForItsLockDelay => (
                "A holder process with `lock_delay` 1.5 s (lease 500 ms; ZooKeeper and etcd: 2 s), renewing",
                "SIGSTOP past the lease; another client waits for the lock; SIGCONT",
                "the server's expiry, read just before the pause, is longer than the lease (the \
                 delay is in it); the waiter is granted no earlier than that expiry and within \
                 lease + delay + 1 s of the pause (ZooKeeper and etcd: + 3 s for their \
                 session and lease ticks; etcd: the delay in whole seconds); the server holds the waiter; the resumed \
                 holder is told its lock was lost (`guard.lost()`) within 2 s",
            ),
            Scenario::PausedPermitHolderLosesItsPermit => (
                "A process holding the one permit of a semaphore, lease 500 ms (ZooKeeper, \
                 etcd: 1 s), renewing",
                "SIGSTOP past the lease; a waiter takes the permit; SIGCONT",
                "the waiter is granted no earlier than the expiry the server held at the pause; \
                 the server holds the waiter's permit, and only it; the resumed holder is told \
                 its permit was lost (`guard.lost()`) within 2 s",
            ),
        }
    }

    /// The feature of the store the scenario needs, if any: where the store lacks it, the
    /// scenario is no case (the conformance suite checks its refusal instead).
    pub fn needs(self) -> Option<distlock::Feature> {
        use distlock::Feature;
        match self {
            Scenario::PausedHolderIsFencedOff => Some(Feature::Fencing),
            Scenario::ReaderKilled | Scenario::PausedReaderLosesItsShare => {
                Some(Feature::ReadLocks)
            }
            Scenario::PermitHolderKilled | Scenario::PausedPermitHolderLosesItsPermit => {
                Some(Feature::Semaphores)
            }
            Scenario::PausedHolderKeptForItsLockDelay => Some(Feature::LockDelay),
            _ => None,
        }
    }

    /// Whether the scenario runs on `backend`, or why not (one line).
    pub fn applies(self, backend: Backend) -> Result<(), &'static str> {
        use Backend::*;
        use Scenario::*;
        if backend != Memory
            && let Some(feature) = self.needs()
            && !distlock::__private::store_supports(backend.store(), feature)
        {
            return Err(lacks(feature));
        }
        match (self, backend) {
            (_, Memory) => Err(ONE_PROCESS),
            (s, PgBouncerItself) if !s.faults_the_server() => Err(
                "faults no server: the same test as through PgBouncer with the server behind it \
                 faulted (the column before)",
            ),
            (BlackholedHolder, Cluster) => Err(
                "cluster nodes announce their own addresses: a proxy in front of them would \
                 carry every client's traffic",
            ),
            (ServerRestartsWithItsData, Advisory) => {
                Err("advisory locks live in the server's memory: a restart forgets them (row 5)")
            }
            (ServerRestartsWithItsData, Named) => {
                Err("named locks live in the server's memory: a restart forgets them (row 5)")
            }
            (ServerRestartsEmpty, PgBouncerItself) => Err(
                "PgBouncer keeps no locks: restarted, it is row 6 (the server behind keeps them)",
            ),
            (ServerRestartsEmpty, b) if !b.is_redis() && b != Advisory && b != Named => Err(
                "the server keeps its data: restarted empty it would be a new, empty \
                 deployment",
            ),
            (ServerRestartsWithItsData, b) if b.is_redis() => Err(
                "the test servers persist nothing (`tests/it/redlock.rs` restarts a node with its \
                 AOF)",
            ),
            (LeaderThenMajorityLost, Redlock) => Err(
                "independent nodes, no leader: rows 5 and 7 fault a majority, \
                 `tests/it/redlock.rs` the rest",
            ),
            (LeaderThenMajorityLost, Cluster) => {
                Err("failover of a master to its replica: `tests/it/cluster.rs`")
            }
            (LeaderThenMajorityLost, Sentinel) => Err(
                "failover of the master to a replica: `tests/it/sentinel.rs`, and the history \
                 checker across two failovers",
            ),
            (LeaderThenMajorityLost, b) if b.is_postgres_table() => {
                Err("one server: no leader to elect, no majority to lose")
            }
            (LeaderThenMajorityLost, Nats) => Err(
                "a JetStream cluster of three with the bucket on three replicas: not in the \
                 suite yet",
            ),
            (LeaderThenMajorityLost, Redis | Advisory | Mysql | Named) => {
                Err("one server: no leader to elect, no majority to lose")
            }
            _ => Ok(()),
        }
    }
}

/// What a run of the fault suite found of one scenario on one backend (see [`Recorder`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Failed,
}

/// The environment variable naming the folder where each fault scenario test writes its
/// outcome (`scripts/test.sh` and `scripts/reliability.sh` set it; unset, nothing is written).
pub const OUTCOMES_ENV: &str = "DISTLOCK_FAULT_OUTCOMES";

/// Writes one scenario test's outcome to [`OUTCOMES_ENV`]'s folder, as
/// `<module>.<test>`: `failed` unless [`passed`](Self::passed) is called before it is dropped
/// (a panic unwinds through it).
pub struct Recorder {
    path: Option<std::path::PathBuf>,
    passed: bool,
}

impl Recorder {
    pub fn start(backend: Backend, scenario: Scenario) -> Recorder {
        let path = std::env::var_os(OUTCOMES_ENV).map(|dir| {
            let dir = std::path::PathBuf::from(dir);
            let _ = std::fs::create_dir_all(&dir);
            dir.join(format!("{}.{}", backend.names().1, scenario.test_name()))
        });
        if let Some(path) = &path {
            // A run that never ends (killed by a timeout) leaves this: it did not pass.
            let _ = std::fs::write(path, "failed\n");
        }
        Recorder {
            path,
            passed: false,
        }
    }

    pub fn passed(mut self) {
        self.passed = true;
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(path) = &self.path {
            let outcome = if self.passed { "passed" } else { "failed" };
            let _ = std::fs::write(path, format!("{outcome}\n"));
        }
    }
}

/// The outcomes a run wrote to `dir` (see [`Recorder`]).
pub fn read_outcomes(
    dir: &std::path::Path,
) -> std::collections::HashMap<(Backend, Scenario), Outcome> {
    let mut outcomes = std::collections::HashMap::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((module, test)) = name.split_once('.') else {
            continue;
        };
        let (Some(backend), Some(scenario)) = (Backend::of_module(module), Scenario::of_test(test))
        else {
            continue;
        };
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let outcome = match text.trim() {
            "passed" => Outcome::Passed,
            _ => Outcome::Failed,
        };
        outcomes.insert((backend, scenario), outcome);
    }
    outcomes
}

/// A backend and the rows of the table one reason leaves empty for it.
type EmptiedRows = (Backend, Vec<usize>);

/// RELIABILITY.md's fault table: a row per scenario ([`Scenario::row`]), a column per backend,
/// each cell what `outcome` says the run found — `pass`, `FAIL`, or `not run` — where the
/// scenario's test exists ([`Scenario::applies`]), and empty where it does not; below it, why
/// each empty cell is empty.
pub fn matrix(outcome: impl Fn(Backend, Scenario) -> Option<Outcome>) -> String {
    let mut table = String::from("| # | Setup | Fault | Asserted |");
    for backend in Backend::ALL {
        table.push_str(&format!(" {} |", backend.names().0));
    }
    table.push_str("\n|---|---|---|---|");
    table.push_str(&"---|".repeat(Backend::ALL.len()));
    table.push('\n');
    let squeeze = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    // Why a cell is empty: each reason, with the backends and rows it empties.
    let mut empty: Vec<(&str, Vec<EmptiedRows>)> = Vec::new();
    for (i, scenario) in Scenario::ALL.iter().enumerate() {
        let (setup, fault, asserted) = scenario.row();
        table.push_str(&format!(
            "| {} | {} | {} | {} |",
            i + 1,
            squeeze(setup),
            squeeze(fault),
            squeeze(asserted)
        ));
        for backend in Backend::ALL {
            match scenario.applies(backend) {
                Ok(()) => table.push_str(match outcome(backend, *scenario) {
                    Some(Outcome::Passed) => " pass |",
                    Some(Outcome::Failed) => " **FAIL** |",
                    None => " not run |",
                }),
                Err(why) => {
                    table.push_str(" |");
                    let at = match empty.iter().position(|(w, _)| *w == why) {
                        Some(at) => at,
                        None => {
                            empty.push((why, Vec::new()));
                            empty.len() - 1
                        }
                    };
                    let backends = &mut empty[at].1;
                    match backends.iter_mut().find(|(b, _)| *b == backend) {
                        Some((_, rows)) => rows.push(i + 1),
                        None => backends.push((backend, vec![i + 1])),
                    }
                }
            }
        }
        table.push('\n');
    }
    table.push_str("\nAn empty cell is a case the suite does not have:\n\n");
    for (why, backends) in empty {
        let wheres: Vec<String> = backends
            .iter()
            .map(|(backend, rows)| {
                let rows = if rows.len() == Scenario::ALL.len() {
                    "every row".to_owned()
                } else {
                    let rows: Vec<String> = rows.iter().map(usize::to_string).collect();
                    format!(
                        "row{} {}",
                        if rows.len() > 1 { "s" } else { "" },
                        rows.join(", ")
                    )
                };
                format!("{} ({rows})", backend.names().0)
            })
            .collect();
        table.push_str(&format!("- {}: {}.\n", wheres.join("; "), squeeze(why)));
    }
    table
}

/// Every scenario test (`<module>::<test>`) the suite has: one where [`Scenario::applies`].
pub fn scenario_tests() -> Vec<String> {
    let mut tests = Vec::new();
    for backend in Backend::ALL {
        for scenario in Scenario::ALL {
            if scenario.applies(backend).is_ok() {
                tests.push(format!("{}::{}", backend.names().1, scenario.test_name()));
            }
        }
    }
    tests
}

/// A backend under faults: its [`Fixture`], with servers of the test's own where a scenario
/// faults them.
#[allow(async_fn_in_trait)]
pub trait Faulty: Fixture + Sized {
    const BACKEND: Backend;

    /// On the binary's shared servers where the backend has them (a namespace of the test's
    /// own): for faults of clients and networks.
    fn shared() -> Self;

    /// On servers of the test's own: for faults of the servers, and counters of the server's
    /// whole traffic.
    fn own() -> Self;

    /// The servers a fault on lock `key` hits (indexes for [`pause`](Self::pause) …): the
    /// server; a majority of the Redlock nodes; the cluster master that owns the key's slot.
    fn victims(&self, _key: &str) -> Vec<usize> {
        vec![0]
    }

    fn pause(&self, victims: &[usize]);
    fn resume(&self, victims: &[usize]);
    /// The TCP ports the victims serve clients on: a request sent to a paused victim waits
    /// there, unread (see [`unread_at`]).
    fn ports(&self, victims: &[usize]) -> Vec<u16>;
    fn kill(&mut self, victims: &[usize]);
    /// Starts killed servers again: empty on Redis (the test servers persist nothing), with
    /// their data elsewhere.
    fn restart(&mut self, victims: &[usize]);

    /// How much sooner than the TTL [`Fixture::ttl`] read the server may free a lock whose
    /// holder stopped at the read: nothing where the TTL is the server's own expiry (Redis,
    /// SQL); on ZooKeeper and etcd the TTL read is the whole lease, which the server counts
    /// from the holder's last heartbeat (at most a third of the lease before).
    fn expiry_slack(&self, _lease: Duration) -> Duration {
        Duration::ZERO
    }

    /// How long after its expiry the server may still hold a lock whose holder stopped:
    /// ZooKeeper and etcd check their sessions and leases on ticks of their own.
    fn expiry_late(&self) -> Duration {
        Duration::from_millis(700)
    }

    /// A lease short enough for a test, long enough for the backend's lease unit (etcd counts
    /// whole seconds; ZooKeeper's session timeout is checked per tick).
    fn short_lease(&self) -> Duration {
        Duration::from_secs(1)
    }

    /// Whether the server frees a lock as soon as its holder's process dies (its connection
    /// closes: PostgreSQL's advisory locks), rather than when its lease runs out.
    fn frees_when_the_holder_dies(&self) -> bool {
        false
    }

    /// Whether waiters queue on the server (a try-once then finds a waiter ahead of it).
    fn queues_waiters(&self) -> bool {
        false
    }

    /// Whether a lock is renewed by its own writes (Redis, SQL), rather than by its session's
    /// or lease's heartbeats, which the client keeps while it lives (ZooKeeper, etcd).
    fn renews_per_lock(&self) -> bool {
        true
    }

    /// Cuts every client connection of every server (where no proxy can sit in between).
    async fn cut_every_client(&self) {
        unreachable!("{:?}: cut through the proxies", Self::BACKEND)
    }

    /// A counter of the writes that reach the servers (acquisitions, renewals, releases).
    async fn writes(&self) -> u64;

    /// The last writes the server logged, for a failure's report (empty where the server
    /// keeps no log of them).
    async fn recent_writes(&self) -> String {
        String::new()
    }

    /// A counter of everything that renews a lock: its writes, and on etcd the lease
    /// keepalives.
    async fn renewals(&self) -> u64 {
        self.writes().await
    }

    /// Three servers of the test's own that elect a leader (ZooKeeper, etcd), and the lease
    /// that a leader's loss must not cost.
    fn quorum() -> (Box<dyn Quorum>, Duration) {
        unreachable!("{:?} has no leader", Self::BACKEND)
    }

    /// Waits until the server has done what it does by itself after lock `name` was released
    /// (ZooKeeper deletes the empty lock parent, a write of its own).
    async fn settle(&self, _name: &str) {}

    /// How many client connections (ZooKeeper) or leases (etcd) the server keeps, through which
    /// a lock could still be renewed; `None` elsewhere.
    async fn sessions(&self) -> Option<usize> {
        None
    }
}

/// The last sixteen lines of `log` that `wanted` keeps, one per line.
fn last_lines(log: &str, wanted: impl Fn(&str) -> bool) -> String {
    let lines: Vec<&str> = log.lines().filter(|line| wanted(line)).collect();
    lines[lines.len().saturating_sub(16)..].join("\n")
}

/// The bytes sent to the servers on `ports` that they have not read yet: the receive queues
/// of the established TCP connections whose local end is one of `ports` (`/proc/net/tcp`,
/// `/proc/net/tcp6`). A request sent to a paused (SIGSTOPped) server waits there: a count
/// above the one before the request proves that the request reached the server.
pub fn unread_at(ports: &[u16]) -> u64 {
    let mut unread = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx_queue:rx_queue …
            let (Some(local), Some(state), Some(queues)) =
                (fields.get(1), fields.get(3), fields.get(4))
            else {
                continue;
            };
            let port = local
                .rsplit(':')
                .next()
                .and_then(|hex| u16::from_str_radix(hex, 16).ok());
            // Established, or closed by the client (CLOSE_WAIT) with the request still unread.
            if !matches!(*state, "01" | "08") || !port.is_some_and(|port| ports.contains(&port)) {
                continue;
            }
            let rx = queues
                .split(':')
                .nth(1)
                .and_then(|hex| u64::from_str_radix(hex, 16).ok());
            unread += rx.unwrap_or(0);
        }
    }
    unread
}

/// Three servers that elect a leader.
pub trait Quorum {
    /// The lock URL of all three, under a namespace of its own.
    fn url(&self) -> String;
    /// The index of the current leader, waiting up to `within` for one.
    fn leader(&self, within: Duration) -> Option<usize>;
    fn kill(&mut self, i: usize);
    fn is_running(&self, i: usize) -> bool;
}

impl Quorum for super::zookeeper::ZkEnsemble {
    fn url(&self) -> String {
        super::zookeeper::ZkEnsemble::url(self, &format!("/{}", super::unique("ensemble")))
    }

    fn leader(&self, within: Duration) -> Option<usize> {
        super::zookeeper::ZkEnsemble::leader(self, within)
    }

    fn kill(&mut self, i: usize) {
        self.servers[i].kill();
    }

    fn is_running(&self, i: usize) -> bool {
        self.servers[i].is_running()
    }
}

impl Quorum for super::etcd::EtcdCluster {
    fn url(&self) -> String {
        super::etcd::EtcdCluster::url(self, &super::unique("cluster"))
    }

    fn leader(&self, within: Duration) -> Option<usize> {
        super::etcd::EtcdCluster::leader(self, within)
    }

    fn kill(&mut self, i: usize) {
        self.members[i].kill();
    }

    fn is_running(&self, i: usize) -> bool {
        self.members[i].is_running()
    }
}

/// The server faults of a fixture on one server of the test's own (its field `$field`).
macro_rules! own_server_faults {
    ($field:ident, $($port:tt)+) => {
        fn ports(&self, _: &[usize]) -> Vec<u16> {
            vec![self.$field.$($port)+]
        }

        fn pause(&self, _: &[usize]) {
            self.$field.pause();
        }

        fn resume(&self, _: &[usize]) {
            self.$field.resume();
        }

        fn kill(&mut self, _: &[usize]) {
            self.$field.own_mut().kill();
        }

        fn restart(&mut self, _: &[usize]) {
            self.$field.own_mut().restart();
        }
    };
}

/// The bounds of a backend whose locks live on a session or lease kept by heartbeats
/// (ZooKeeper, etcd): the server counts a stopped holder's lease from its last heartbeat, checks
/// expiry on ticks of its own, and queues waiters.
macro_rules! session_bounds {
    () => {
        fn expiry_slack(&self, lease: Duration) -> Duration {
            lease * 2 / 5
        }

        fn expiry_late(&self) -> Duration {
            Duration::from_secs(3)
        }

        fn short_lease(&self) -> Duration {
            Duration::from_secs(2)
        }

        fn queues_waiters(&self) -> bool {
            true
        }

        fn renews_per_lock(&self) -> bool {
            false
        }
    };
}

/// Calls of the lock commands (SET, EVAL, EVALSHA, PEXPIRE) on every running server of `all`.
async fn redis_writes(all: &[RedisServer]) -> u64 {
    let mut total = 0;
    for server in all.iter().filter(|s| s.is_running()) {
        total += server
            .commands_calls(&["set", "eval", "evalsha", "pexpire"])
            .await;
    }
    total
}

impl Faulty for RedisFixture {
    const BACKEND: Backend = Backend::Redis;

    fn shared() -> Self {
        RedisFixture::new()
    }

    fn own() -> Self {
        RedisFixture::new()
    }

    fn pause(&self, _: &[usize]) {
        self.server.pause();
    }

    fn ports(&self, _: &[usize]) -> Vec<u16> {
        vec![self.server.port()]
    }

    fn resume(&self, _: &[usize]) {
        self.server.resume();
    }

    fn kill(&mut self, _: &[usize]) {
        self.server.kill();
    }

    fn restart(&mut self, _: &[usize]) {
        self.server.restart();
    }

    async fn writes(&self) -> u64 {
        redis_writes(std::slice::from_ref(&self.server)).await
    }
}

/// The master found through a sentinel that never fails it over during a test (the faults here
/// are the master's own; failovers are `tests/it/sentinel.rs`'s), with `?replicas=1`.
impl Faulty for SentinelFixture {
    const BACKEND: Backend = Backend::Sentinel;

    fn shared() -> Self {
        SentinelFixture::new()
    }

    fn own() -> Self {
        SentinelFixture::new()
    }

    fn pause(&self, _: &[usize]) {
        self.group.servers[0].pause();
    }

    fn ports(&self, _: &[usize]) -> Vec<u16> {
        vec![self.group.servers[0].port()]
    }

    fn resume(&self, _: &[usize]) {
        self.group.servers[0].resume();
    }

    fn kill(&mut self, _: &[usize]) {
        self.group.servers[0].kill();
    }

    fn restart(&mut self, _: &[usize]) {
        self.group.servers[0].restart();
    }

    async fn writes(&self) -> u64 {
        redis_writes(std::slice::from_ref(&self.group.servers[0])).await
    }
}

impl Faulty for RedlockFixture {
    const BACKEND: Backend = Backend::Redlock;

    fn shared() -> Self {
        RedlockFixture::new(3)
    }

    fn own() -> Self {
        RedlockFixture::new(3)
    }

    /// A majority: two of three.
    fn victims(&self, _: &str) -> Vec<usize> {
        vec![0, 1]
    }

    fn pause(&self, victims: &[usize]) {
        victims.iter().for_each(|&i| self.servers[i].pause());
    }

    fn ports(&self, victims: &[usize]) -> Vec<u16> {
        victims.iter().map(|&i| self.servers[i].port()).collect()
    }

    fn resume(&self, victims: &[usize]) {
        victims.iter().for_each(|&i| self.servers[i].resume());
    }

    fn kill(&mut self, victims: &[usize]) {
        victims.iter().for_each(|&i| self.servers[i].kill());
    }

    fn restart(&mut self, victims: &[usize]) {
        victims.iter().for_each(|&i| self.servers[i].restart());
    }

    async fn writes(&self) -> u64 {
        redis_writes(&self.servers).await
    }
}

impl Faulty for ClusterFixture {
    const BACKEND: Backend = Backend::Cluster;

    fn shared() -> Self {
        ClusterFixture::own()
    }

    /// The other masters serve their slots while one is down.
    fn own() -> Self {
        let fixture = ClusterFixture::new();
        for i in 0..fixture.cluster.nodes.len() {
            let () = fixture.cluster.query(
                i,
                redis::cmd("CONFIG")
                    .arg("SET")
                    .arg("cluster-require-full-coverage")
                    .arg("no"),
            );
        }
        fixture
    }

    /// The master that owns the key's slot.
    fn victims(&self, key: &str) -> Vec<usize> {
        let slot = self.cluster.slot(&format!("{{lock:{key}}}"), 0);
        vec![self.cluster.owner_of(slot, 0)]
    }

    fn pause(&self, victims: &[usize]) {
        victims.iter().for_each(|&i| self.cluster.nodes[i].pause());
    }

    fn ports(&self, victims: &[usize]) -> Vec<u16> {
        victims
            .iter()
            .map(|&i| self.cluster.nodes[i].port())
            .collect()
    }

    fn resume(&self, victims: &[usize]) {
        victims.iter().for_each(|&i| self.cluster.nodes[i].resume());
    }

    fn kill(&mut self, victims: &[usize]) {
        victims.iter().for_each(|&i| self.cluster.nodes[i].kill());
    }

    /// Restarts the victims empty (a node keeps its slot map in `nodes.conf`), and waits until
    /// the cluster is whole again.
    fn restart(&mut self, victims: &[usize]) {
        victims
            .iter()
            .for_each(|&i| self.cluster.nodes[i].restart());
        for &i in victims {
            tokio::task::block_in_place(|| self.cluster.wait_until_ok(i, Duration::from_secs(20)));
        }
    }

    async fn cut_every_client(&self) {
        for i in 0..self.cluster.nodes.len() {
            for kind in ["normal", "pubsub"] {
                let _: i64 = self
                    .cluster
                    .query(i, redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg(kind));
            }
        }
    }

    async fn writes(&self) -> u64 {
        redis_writes(&self.cluster.nodes).await
    }
}

impl Faulty for PostgresFixture {
    const BACKEND: Backend = Backend::Postgres;

    fn shared() -> Self {
        PostgresFixture::new()
    }

    fn own() -> Self {
        PostgresFixture::own()
    }

    own_server_faults!(server, port());

    /// The statements that write the lock table, in the server's statement log.
    async fn writes(&self) -> u64 {
        let log = self.server.log();
        let table = self.table();
        ["INSERT INTO", "UPDATE", "DELETE FROM"]
            .iter()
            .map(|verb| log.matches(&format!("{verb} \"{table}\" ")).count() as u64)
            .sum()
    }

    async fn recent_writes(&self) -> String {
        last_lines(&self.server.log(), |line| line.contains(" LOG: "))
    }
}

/// `postgres://` through PgBouncer in transaction mode (`pooler=transaction`, `listen_url` on
/// the server), with the server behind it as the fault's victim or, when `ITSELF`, PgBouncer:
/// each server fault is a fault of that one, the other runs on.
pub struct PgBouncerFixture<const ITSELF: bool>(pub PostgresFixture);

/// The fault suite's fixture whose faults hit the server behind PgBouncer.
pub type BehindPgBouncer = PgBouncerFixture<false>;
/// The fault suite's fixture whose faults hit PgBouncer (the server runs on).
pub type PgBouncerItself = PgBouncerFixture<true>;

#[async_trait::async_trait(?Send)]
impl<const ITSELF: bool> Fixture for PgBouncerFixture<ITSELF> {
    fn url(&self) -> String {
        self.0.url()
    }
    async fn holder(&self, name: &str) -> Option<String> {
        self.0.holder(name).await
    }
    async fn ttl(&self, name: &str) -> Option<Duration> {
        self.0.ttl(name).await
    }
    async fn delete(&self, name: &str) {
        self.0.delete(name).await
    }
    async fn overwrite(&self, name: &str, token: &str, ttl: Duration) {
        self.0.overwrite(name, token, ttl).await
    }
    async fn slowed(&self, min: Duration, max: Duration) -> super::fixture::Slowed {
        self.0.slowed(min, max).await
    }
    async fn supports(&self, feature: distlock::Feature) -> bool {
        self.0.supports(feature).await
    }
    async fn readers(&self, name: &str) -> Vec<(String, Option<Duration>)> {
        self.0.readers(name).await
    }
    async fn permits(&self, name: &str) -> Vec<(String, Option<Duration>)> {
        self.0.permits(name).await
    }
    async fn anything_at(&self, name: &str) -> bool {
        self.0.anything_at(name).await
    }
}

impl<const ITSELF: bool> Faulty for PgBouncerFixture<ITSELF> {
    const BACKEND: Backend = if ITSELF {
        Backend::PgBouncerItself
    } else {
        Backend::BehindPgBouncer
    };

    fn shared() -> Self {
        PgBouncerFixture(PostgresFixture::pgbouncer(true))
    }

    fn own() -> Self {
        PgBouncerFixture(PostgresFixture::own_pgbouncer(true))
    }

    fn pause(&self, _: &[usize]) {
        match ITSELF {
            true => self.0.bouncer().pause(),
            false => self.0.server.pause(),
        }
    }

    fn resume(&self, _: &[usize]) {
        match ITSELF {
            true => self.0.bouncer().resume(),
            false => self.0.server.resume(),
        }
    }

    fn ports(&self, _: &[usize]) -> Vec<u16> {
        match ITSELF {
            true => vec![self.0.bouncer().port()],
            false => vec![self.0.server.port()],
        }
    }

    fn kill(&mut self, _: &[usize]) {
        match ITSELF {
            true => self.0.bouncer_mut().kill(),
            false => self.0.server.own_mut().kill(),
        }
    }

    fn restart(&mut self, _: &[usize]) {
        match ITSELF {
            true => self.0.bouncer_mut().restart(),
            false => self.0.server.own_mut().restart(),
        }
    }

    /// The statements that write the lock table, in the server's statement log.
    async fn writes(&self) -> u64 {
        self.0.writes().await
    }

    async fn recent_writes(&self) -> String {
        self.0.recent_writes().await
    }
}

impl Faulty for AdvisoryFixture {
    const BACKEND: Backend = Backend::Advisory;

    fn shared() -> Self {
        AdvisoryFixture::new()
    }

    fn own() -> Self {
        AdvisoryFixture::own()
    }

    own_server_faults!(server, port());

    fn frees_when_the_holder_dies(&self) -> bool {
        true
    }

    fn queues_waiters(&self) -> bool {
        true
    }

    /// The statements of distlock's holds (each carries its comment), in the server's log.
    async fn writes(&self) -> u64 {
        self.server.log().matches("/* distlock ").count() as u64
    }

    async fn recent_writes(&self) -> String {
        last_lines(&self.server.log(), |line| line.contains("/* distlock "))
    }
}

impl Faulty for MysqlFixture {
    const BACKEND: Backend = Backend::Mysql;

    fn shared() -> Self {
        MysqlFixture::new()
    }

    fn own() -> Self {
        MysqlFixture::own()
    }

    own_server_faults!(server, port());

    /// `Com_insert + Com_update + Com_delete` (the server's: a server of the test's own).
    async fn writes(&self) -> u64 {
        let rows: Vec<(String, u64)> = self
            .rows(
                "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
                 WHERE VARIABLE_NAME IN ('COM_INSERT', 'COM_UPDATE', 'COM_DELETE')",
                (),
            )
            .await;
        assert_eq!(rows.len(), 3, "{rows:?}");
        rows.iter().map(|(_, n)| n).sum()
    }
}

impl Faulty for NamedFixture {
    const BACKEND: Backend = Backend::Named;

    fn shared() -> Self {
        NamedFixture::new()
    }

    fn own() -> Self {
        NamedFixture::own()
    }

    own_server_faults!(server, port());

    fn frees_when_the_holder_dies(&self) -> bool {
        true
    }

    fn queues_waiters(&self) -> bool {
        true
    }

    /// The statements clients sent (`Com_select + Com_do + Com_set_option + Com_insert`, the
    /// server's: a server of the test's own) less the fixture's own.
    async fn writes(&self) -> u64 {
        let rows: Vec<(String, u64)> = self
            .rows(
                "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
                 WHERE VARIABLE_NAME IN ('COM_SELECT', 'COM_DO', 'COM_SET_OPTION', 'COM_INSERT')",
                (),
            )
            .await;
        assert_eq!(rows.len(), 4, "{rows:?}");
        let all: u64 = rows.iter().map(|(_, n)| n).sum();
        all - self.statements()
    }
}

impl Faulty for ZookeeperFixture {
    const BACKEND: Backend = Backend::Zookeeper;

    fn shared() -> Self {
        ZookeeperFixture::new()
    }

    fn own() -> Self {
        ZookeeperFixture::own()
    }

    own_server_faults!(server, client_port);

    session_bounds!();

    fn quorum() -> (Box<dyn Quorum>, Duration) {
        (
            Box::new(super::zookeeper::ZkEnsemble::start()),
            Duration::from_secs(6),
        )
    }

    /// The last transaction id (`srvr`): every create, delete, set and session change.
    async fn writes(&self) -> u64 {
        let reply =
            super::zookeeper::four_letter(self.server.client_port, "srvr").expect("srvr answers");
        let zxid = reply
            .lines()
            .find_map(|line| line.strip_prefix("Zxid: 0x"))
            .expect("srvr reports the zxid");
        u64::from_str_radix(zxid.trim(), 16).expect("a hex zxid")
    }

    async fn settle(&self, name: &str) {
        let parent = self.parent(name);
        let zk = self.zk().await;
        let gone = super::eventually(Duration::from_secs(5), || async {
            matches!(zk.check_stat(&parent).await, Ok(None))
        })
        .await;
        assert!(gone, "the empty lock parent {parent} stays");
    }

    async fn sessions(&self) -> Option<usize> {
        let reply =
            super::zookeeper::four_letter(self.server.client_port, "mntr").expect("mntr answers");
        let count = |name: &str| {
            reply
                .lines()
                .find_map(|line| line.strip_prefix(name)?.trim().parse::<usize>().ok())
                .unwrap_or(0)
        };
        // Connections, not sessions: a session with no lock on it (the one a client opens to
        // check its chroot) is not closed by the runtime's shutdown, it simply ends at its
        // timeout; but its connection is gone, and with it every heartbeat.
        Some(count("zk_num_alive_connections"))
    }
}

impl Faulty for EtcdFixture {
    const BACKEND: Backend = Backend::Etcd;

    fn shared() -> Self {
        EtcdFixture::new()
    }

    fn own() -> Self {
        EtcdFixture::own()
    }

    own_server_faults!(member, client_port);

    session_bounds!();

    fn quorum() -> (Box<dyn Quorum>, Duration) {
        (
            Box::new(super::etcd::EtcdCluster::start()),
            Duration::from_secs(5),
        )
    }

    /// The store's revision: every put and delete.
    async fn writes(&self) -> u64 {
        let port = self.member.client_port;
        let reply = tokio::task::spawn_blocking(move || {
            super::etcd::http_call(port, "POST", "/v3/kv/range", r#"{"key":"AA=="}"#)
        })
        .await
        .unwrap()
        .expect("etcd answers");
        super::store::etcd::field(&reply, "revision")
            .and_then(|r| r.parse().ok())
            .expect("a revision")
    }

    /// The revision and the lease keepalives received (the member's gRPC metrics).
    async fn renewals(&self) -> u64 {
        let port = self.member.client_port;
        let metrics = tokio::task::spawn_blocking(move || {
            super::etcd::http_call(port, "GET", "/metrics", "")
        })
        .await
        .unwrap()
        .expect("/metrics answers");
        let keepalives = metrics
            .lines()
            .filter(|line| {
                line.starts_with("grpc_server_msg_received_total")
                    && line.contains(r#"grpc_method="LeaseKeepAlive""#)
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64;
        keepalives + self.writes().await
    }

    async fn sessions(&self) -> Option<usize> {
        let port = self.member.client_port;
        let reply = tokio::task::spawn_blocking(move || {
            super::etcd::http_call(port, "POST", "/v3/lease/leases", "{}")
        })
        .await
        .unwrap()
        .expect("etcd answers");
        Some(reply.matches(r#""ID""#).count())
    }
}

/// `nats://` on a `nats-server` of the test's own: a lock is a key with a per-key TTL the server
/// keeps in whole seconds, and the client deletes an unrenewed lock at its lease.
impl Faulty for NatsFixture {
    const BACKEND: Backend = Backend::Nats;

    fn shared() -> Self {
        NatsFixture::new()
    }

    fn own() -> Self {
        NatsFixture::own()
    }

    own_server_faults!(server, port);

    /// The TTL read is whole seconds (the lease rounded up), counted from the last write by the
    /// server's stamp; the server's expiry runs on a timer of its own.
    fn expiry_late(&self) -> Duration {
        Duration::from_millis(1_500)
    }

    /// The lock writes to the bucket's subjects, refused ones included (a subscription of the
    /// fixture's own sees every publish; the server's expiry markers are not publishes).
    async fn writes(&self) -> u64 {
        self.publishes().await
    }
}

/// Why a scenario that needs `feature` is no case of a store without it.
fn lacks(feature: distlock::Feature) -> &'static str {
    use distlock::Feature;
    match feature {
        Feature::Fencing => {
            "the store has no fencing tokens (their refusal: the conformance suite's \
             `fencing_and_elections_are_refused_writing_nothing`)"
        }
        Feature::ReadLocks => {
            "the store has no read locks (their refusal: the conformance suite's \
             `read_locks_are_refused_writing_nothing`)"
        }
        Feature::Semaphores => {
            "the store has no semaphores (their refusal: the conformance suite's \
             `semaphores_are_refused_writing_nothing`)"
        }
        Feature::LockDelay => {
            "the store keeps no lock-delay (its refusal: the conformance suite's \
             `lock_delay_is_refused_writing_nothing`)"
        }
        _ => "the store lacks a feature the scenario needs",
    }
}
