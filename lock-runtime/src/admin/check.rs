//! [`LockClient::check`]: whether a store is ready for distlock as this client is configured —
//! what `distlock check` prints, one line per [`Finding`].

use std::time::{Duration, Instant};

use crate::Feature;
use crate::client::LockClient;

/// One thing [`LockClient::check`] looked at, and what it found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// What was checked, one word or two: `server`, `round trip`, `lock`, `kinds`, `clock`,
    /// `replicas`, `cluster`, `pooler`, `bucket`, `identity`, `acl` (ZooKeeper), `role`
    /// (etcd).
    pub check: &'static str,
    /// Whether it is as distlock needs it.
    pub passed: bool,
    /// What was found, one line.
    pub found: String,
    /// For a check that failed: what to do.
    pub fix: Option<String>,
}

impl Finding {
    /// A check that passed.
    pub(crate) fn pass(check: &'static str, found: impl Into<String>) -> Finding {
        Finding {
            check,
            passed: true,
            found: found.into(),
            fix: None,
        }
    }

    /// A check that failed, and what to do.
    pub(crate) fn fail(
        check: &'static str,
        found: impl Into<String>,
        fix: impl Into<String>,
    ) -> Finding {
        Finding {
            check,
            passed: false,
            found: found.into(),
            fix: Some(fix.into()),
        }
    }
}

/// What [`LockClient::check`] found, every line.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Checkup {
    /// The backend kind: `redis`, `postgres`, …
    pub backend: &'static str,
    /// The URL, password redacted.
    pub url: String,
    /// Each check, in the order made.
    pub findings: Vec<Finding>,
}

impl Checkup {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.findings.iter().all(|finding| finding.passed)
    }
}

/// The key of the lock [`LockClient::check`] takes and gives back (a random suffix after it).
pub const CHECK_KEY_PREFIX: &str = "distlock-check:";

/// Round trips timed for the median.
const ROUND_TRIPS: usize = 5;

impl LockClient {
    /// Checks that the store is ready for distlock as this client is configured (a connected
    /// client has passed the connection's own checks already: the server answers, accepts the
    /// credentials, speaks TLS if asked, runs scripts): the server and its version, the median
    /// of five round trips, what the store serves, who the server says this client is and
    /// whether its connection is encrypted (Redis, the SQL lock tables, ZooKeeper, etcd), what
    /// the store lets it do (the ZooKeeper chroot's ACL, the etcd user's roles over the
    /// prefix), the store's own settings that matter (the replicas `?replicas=` asks for, a
    /// Cluster's slots, the server's clock against this host's on Redis, the SQL lock tables
    /// and ZooKeeper, a transaction pooler between client and
    /// PostgreSQL that the URL does not declare with `pooler=transaction`, a NATS bucket's
    /// settings), and a real lock — taken under [`CHECK_KEY_PREFIX`], seen by `inspect`, given
    /// back and seen gone — which shows this user may write where locks live (Redis scripts,
    /// the SQL lock table or `GET_LOCK`, the ZooKeeper ACL, the etcd role's key range). What
    /// `distlock check` prints. Never fails: a check that cannot be made is a failed
    /// [`Finding`] naming why.
    ///
    /// ```
    /// # use distlock_runtime as distlock;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// let client = distlock::LockClient::connect("memory://").await?;
    /// let checkup = client.check().await;
    /// assert!(checkup.passed(), "{checkup:?}");
    /// assert!(checkup.findings.iter().any(|f| f.check == "lock" && f.passed));
    /// # Ok(()) }
    /// ```
    pub async fn check(&self) -> Checkup {
        let backend = self.admin_backend();
        let mut findings = Vec::new();
        let mut times = Vec::with_capacity(ROUND_TRIPS);
        let mut version = None;
        for _ in 0..=ROUND_TRIPS {
            let started = Instant::now();
            match backend.server_version().await {
                Ok(answer) => {
                    // The first may (re)connect: not timed.
                    if version.is_some() {
                        times.push(started.elapsed());
                    }
                    version = Some(answer);
                }
                Err(error) => {
                    findings.push(Finding::fail(
                        "server",
                        format!("did not answer: {error}"),
                        "check the URL and that the server runs (distlock ping says the same)",
                    ));
                    return self.checkup(findings);
                }
            }
        }
        findings.push(Finding::pass("server", version.unwrap_or_default()));
        times.sort();
        findings.push(Finding::pass(
            "round trip",
            format!(
                "{:.2} ms (median of {ROUND_TRIPS})",
                times[times.len() / 2].as_secs_f64() * 1e3
            ),
        ));
        let (serves, lacks): (Vec<Feature>, Vec<Feature>) =
            Feature::ALL.into_iter().partition(|f| self.supports(*f));
        let list = |features: &[Feature]| {
            features
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        findings.push(Finding::pass(
            "kinds",
            if lacks.is_empty() {
                format!("locks and every feature: {}", list(&serves))
            } else {
                format!(
                    "locks, {}; not {} (the table in distlock::guide::backends)",
                    list(&serves),
                    list(&lacks)
                )
            },
        ));
        findings.extend(backend.diagnose().await);
        findings.push(self.check_a_lock().await);
        self.checkup(findings)
    }

    fn checkup(&self, findings: Vec<Finding>) -> Checkup {
        Checkup {
            backend: self.admin_backend().store(),
            url: self.url().to_owned(),
            findings,
        }
    }

    /// Takes a lock, sees it held, gives it back and sees it gone.
    async fn check_a_lock(&self) -> Finding {
        let key = format!("{CHECK_KEY_PREFIX}{:016x}", fastrand::u64(..));
        let started = Instant::now();
        let failed = |what: String| {
            // A statement lost to an undeclared transaction pooler says so itself.
            let fix = if what.contains("add `pooler=transaction`") {
                "add `pooler=transaction` to the URL: a transaction pooler is between (the \
                 `pooler` line)"
            } else {
                right_to_lock(self.admin_backend().store())
            };
            Finding::fail("lock", what, fix)
        };
        let guard = match self
            .lock(&key)
            .lease(Duration::from_secs(10))
            .wait(Duration::ZERO)
            .acquire()
            .await
        {
            Ok(guard) => guard,
            Err(error) => return failed(format!("could not take `{key}`: {error}")),
        };
        match self.inspect(&key).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                let _ = guard.release().await;
                return failed(format!("took `{key}`, but `inspect` does not see it"));
            }
            Err(error) => {
                let _ = guard.release().await;
                return failed(format!("took `{key}`, but cannot read it back: {error}"));
            }
        }
        if let Err(error) = guard.release().await {
            return failed(format!("took `{key}`, but could not give it back: {error}"));
        }
        match self.inspect(&key).await {
            Ok(None) => Finding::pass(
                "lock",
                format!(
                    "took, read and gave back `{key}` in {:.1} ms",
                    started.elapsed().as_secs_f64() * 1e3
                ),
            ),
            Ok(Some(_)) => failed(format!("gave back `{key}`, but it is still there")),
            Err(error) => failed(format!("gave back `{key}`, but cannot read it: {error}")),
        }
    }
}

/// The `clock` finding: the server's time (seconds since the Unix epoch) that `read` gets,
/// against this host's clock around the read (`None`: the server did not tell it). Where it is
/// read, the server judges leases by its own clock alone.
#[cfg_attr(
    not(any(
        feature = "redis",
        feature = "postgres",
        feature = "mysql",
        feature = "zookeeper"
    )),
    allow(dead_code)
)]
pub(crate) async fn clock_check(read: impl std::future::Future<Output = Option<f64>>) -> Finding {
    let unix = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    };
    let before = std::time::SystemTime::now();
    let server = read.await;
    let here = (unix(before) + unix(std::time::SystemTime::now())) / 2.0;
    let Some(server) = server else {
        return Finding::pass("clock", "the server did not tell its time");
    };
    // (Rounded to whole milliseconds, without a "-0".)
    let offset_ms = ((server - here) * 1e3).round() + 0.0;
    let found = format!(
        "the server's clock is {offset_ms:+.0} ms from this host's (leases are judged by the \
         server's clock alone)"
    );
    if offset_ms.abs() <= 1_000.0 {
        Finding::pass("clock", found)
    } else {
        Finding::fail(
            "clock",
            found,
            "synchronise the clocks (NTP, chrony): locks stay safe, but the ages and grant \
             times `distlock show` prints are off by as much",
        )
    }
}

/// The `identity` finding: the user the server says this client is (`None`: it did not say),
/// and the connection's TLS (`None`: plain text; else what is known of it).
#[cfg_attr(
    not(any(
        feature = "redis",
        feature = "postgres",
        feature = "mysql",
        feature = "zookeeper",
        feature = "etcd"
    )),
    allow(dead_code)
)]
pub(crate) fn identity_finding(user: Option<&str>, tls: Option<&str>) -> Finding {
    match user {
        Some(user) => identity_as(&format!("as `{user}`"), tls),
        None => identity_as("(the server did not say as whom)", tls),
    }
}

/// The `identity` finding of a client logged in `who` (`as \`app\``), over `tls` as
/// [`identity_finding`] takes it.
#[cfg_attr(
    not(any(
        feature = "redis",
        feature = "postgres",
        feature = "mysql",
        feature = "zookeeper",
        feature = "etcd"
    )),
    allow(dead_code)
)]
pub(crate) fn identity_as(who: &str, tls: Option<&str>) -> Finding {
    let over = match tls {
        Some("") => "over TLS".to_owned(),
        Some(detail) => format!("over TLS ({detail})"),
        None => "in plain text".to_owned(),
    };
    Finding::pass("identity", format!("logged in {who}, {over}"))
}

/// What to give the URL's user so that it may write where `store` keeps locks.
fn right_to_lock(store: &str) -> &'static str {
    match store {
        "redis" | "redlock" => {
            "give the URL's user an ACL over the lock keys and their fencing counters (`~lock:*` \
             `~lock-fence:*`, or the client's prefixes) that allows scripts (`+@scripting`) and \
             the lock commands (`+@write +@read`)"
        }
        "postgres" | "mysql" => {
            "grant the URL's user SELECT, INSERT, UPDATE and DELETE on the lock table and its \
             fencing table (or CREATE on the schema, for distlock to make them)"
        }
        "zookeeper" => {
            "give the URL's identity `cdrwa` on the chroot and the lock nodes (`setAcl`), or \
             connect as the identity their ACL names"
        }
        "etcd" => {
            "give the URL's user a role with readwrite on the prefix's key range \
             (`etcdctl role grant-permission ROLE readwrite --prefix=true PREFIX`)"
        }
        "nats" => {
            "let the URL's user publish to `$KV.<bucket>.>` and `$JS.API.>` and subscribe to \
             `distlock-ev.<bucket>.>` and `_INBOX.>`"
        }
        _ => "give the URL's user the right to write where locks live",
    }
}
