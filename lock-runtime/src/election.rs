//! Leader election on the lock: [`LockClient::election`], [`Election::campaign`],
//! [`Leadership`], [`Election::leader`] and [`Election::observe`].
//!
//! An election named `N` is the lock `N` taken with fencing: the candidate that holds it leads,
//! its fencing token is its term (strictly rising with every new leader), and its owner token
//! carries the identity it campaigned with (`=<identity>:<pid>:<unix ms>:<random>` instead of
//! `<host>:<pid>:…`), so anyone who can inspect the lock — another process, `distlock leader`,
//! `distlock list` — reads who leads without a second write. Candidates wait as lock waiters do
//! (woken by the leader's release, or when its lease runs out); a leader's lease is renewed by
//! the lock's watchdog, and [`Leadership::lost`] is the lock's loss signal.

use std::future::Future;
use std::time::{Duration, SystemTime};

use futures_util::Stream;

use crate::client::LockClient;
use crate::error::LockError;
use crate::guard::LockGuard;

/// How often [`Election::observe`] asks who leads unless [`Election::poll`] says otherwise.
pub(crate) const DEFAULT_OBSERVE_POLL: Duration = Duration::from_millis(500);

/// One election, by name: made by [`LockClient::election`]. Cheap to clone.
///
/// ```
/// # use distlock_runtime as distlock;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock::LockError> {
/// let client = distlock::LockClient::connect("memory://").await?;
/// let election = client.election("reports");
/// let leader = election.campaign("host-a:4242").await?; // waits until this candidate leads
/// assert_eq!(leader.identity(), "host-a:4242");
/// let seen = election.leader().await?.expect("a leader");
/// assert_eq!((seen.identity(), seen.term()), ("host-a:4242", leader.term()));
/// leader.resign().await?; // the next candidate leads at once
/// assert!(election.leader().await?.is_none());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use = "an election does nothing until `.campaign(..)`, `.leader()` or `.observe()`"]
pub struct Election {
    client: LockClient,
    name: String,
    lease: Duration,
    wait: Option<Duration>,
    poll: Duration,
}

impl LockClient {
    /// The election `name`: a lock of that key whose holder leads. Campaign with
    /// [`Election::campaign`]; read the leader from any process with [`Election::leader`] or
    /// [`Election::observe`]. The lease is the client's default, and a campaign waits until it
    /// leads, unless [`Election::lease`] / [`Election::wait`] say otherwise.
    ///
    /// Every store that hands out fencing tokens serves elections (the term is one); on one
    /// that does not, every call fails with [`LockError::Unsupported`] saying why (which
    /// stores do: the table in `distlock::guide::backends`). A `memory://` election is one
    /// process's.
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election {
            client: self.clone(),
            name: name.into(),
            lease: self.default_lease(),
            wait: None,
            poll: DEFAULT_OBSERVE_POLL,
        }
    }
}

impl Election {
    /// How long a leader that stops renewing (crashed, paused, cut off) keeps leading: a
    /// standby leads at most one lease (plus the backend's detection bound) after the leader
    /// dies. Renewed every third of it while leading.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long [`campaign`](Self::campaign) waits to lead before failing with
    /// [`LockError::Timeout`] (default: until it leads). `Duration::ZERO` tries once.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// How often [`observe`](Self::observe) asks who leads (default
    /// [`LockClient::DEFAULT_OBSERVE_POLL`]) besides when the store announces a change: where it announces
    /// none (PostgreSQL, MySQL), a leader that comes and goes within one interval may not be
    /// seen.
    pub fn poll(mut self, interval: Duration) -> Self {
        self.poll = interval.max(Duration::from_millis(10));
        self
    }

    /// The election's name (its lock's key).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Campaigns as `identity` (a host and port, a pod name: what [`leader`](Self::leader)
    /// reports) and waits until this candidate leads, or until [`wait`](Self::wait) ends
    /// ([`LockError::Timeout`]). Candidates wait as lock waiters do, without polling: the
    /// leader's [`resign`](Leadership::resign) lets the next one lead within a round trip; a
    /// dead leader is replaced once its lease runs out.
    ///
    /// Errors, before anything is written: an empty `identity`, one with a control character,
    /// or one longer than the token can carry (63 bytes as stored, a byte other than a letter,
    /// digit, `.`, `-` or `_` counting three) is [`LockError::Config`], as is a campaign on a
    /// name held as a plain lock, a read lock or a semaphore; a bad name is
    /// [`LockError::InvalidKey`].
    pub async fn campaign(&self, identity: impl Into<String>) -> Result<Leadership, LockError> {
        let identity = identity.into();
        self.served()?;
        let encoded = self.check_identity(&identity)?;
        // A name that is another kind of lock now is refused before anything is written.
        if let Some(info) = self.client.inspect(&self.name).await? {
            self.of_an_election(&info)?;
        }
        let request = self
            .client
            .lock(self.name.as_str())
            .lease(self.lease)
            .fencing(true);
        let request = match self.wait {
            Some(wait) => request.wait(wait),
            None => request.wait_forever(),
        };
        let guard = crate::token::with_identity(encoded, request.acquire()).await?;
        let Some(term) = guard.fencing_token() else {
            let _ = guard.release().await;
            return Err(LockError::Unsupported {
                backend: self.client.admin_backend().store(),
                feature: crate::Feature::Elections,
                key: Some(self.name.clone()),
                reason: "it gave no fencing token, so a leader would have no term",
            });
        };
        tracing::info!(election = %self.name, %identity, term, "distlock: leading");
        Ok(Leadership {
            guard,
            identity,
            term,
        })
    }

    /// Who leads now, from any process (campaigning or not): `None` when nobody does.
    ///
    /// Errors: [`LockError::Config`] when the name is held as another kind of lock (a plain
    /// lock, a read lock, a semaphore); [`LockError::Unsupported`] on a store without
    /// elections; [`LockError::Backend`] when the backend fails.
    pub async fn leader(&self) -> Result<Option<Leader>, LockError> {
        self.served()?;
        let Some(info) = self.client.inspect(&self.name).await? else {
            return Ok(None);
        };
        self.of_an_election(&info)
    }

    /// Every change of leader, as [`leader`](Self::leader) reports it: first who leads now,
    /// then each new leader (or `None` when nobody leads), asked again as soon as the store
    /// announces a change of the election's lock (Redis, ZooKeeper, etcd, `memory://`: see
    /// [`LockClient::watch`](crate::LockClient::watch)), and every [`poll`](Self::poll)
    /// interval. Never an older term after a newer one: a stale answer
    /// (from a lagging replica, or a slow reply) is skipped. A failed look is an `Err` item,
    /// and the stream goes on; it ends only when dropped.
    pub fn observe(
        &self,
    ) -> impl Stream<Item = Result<Option<Leader>, LockError>> + Send + 'static {
        struct State {
            election: Election,
            /// The store's announcements of changes to the election's lock, where it makes
            /// them.
            follower: crate::admin::Follower,
            /// The last leader reported: `None` before the first item.
            last: Option<Option<u64>>,
            newest: u64,
            first: bool,
        }
        let state = State {
            election: self.clone(),
            follower: crate::admin::Follower::new(&self.client, &self.name),
            last: None,
            newest: 0,
            first: true,
        };
        futures_util::stream::unfold(state, |mut state| async move {
            loop {
                if !std::mem::take(&mut state.first) {
                    let poll = state.election.poll;
                    let until = tokio::time::Instant::now() + poll;
                    state.follower.wait(until, poll).await;
                }
                state.follower.follow().await;
                match state.election.leader().await {
                    Err(error) => return Some((Err(error), state)),
                    Ok(now) => {
                        let term = now.as_ref().map(|leader| leader.term);
                        if state.last == Some(term) {
                            continue;
                        }
                        if term.is_some_and(|term| term < state.newest) {
                            continue; // older than one already reported
                        }
                        state.newest = state.newest.max(term.unwrap_or(0));
                        state.last = Some(term);
                        return Some((Ok(now), state));
                    }
                }
            }
        })
    }

    /// Elections need fencing tokens (a leader's term is one): a store without them refuses.
    fn served(&self) -> Result<(), LockError> {
        self.client
            .admin_backend()
            .capabilities()
            .require(crate::Feature::Elections, Some(&self.name))
    }

    fn check_identity(&self, identity: &str) -> Result<String, LockError> {
        let refuse = |why: String| {
            Err(LockError::Config(format!(
                "election `{}`: the identity {why}",
                self.name
            )))
        };
        if identity.is_empty() {
            return refuse(
                "is empty: give what names this candidate (`host:port`, a pod name)".into(),
            );
        }
        if let Some(c) = identity.chars().find(|c| c.is_control()) {
            return refuse(format!("{identity:?} has a control character {c:?}"));
        }
        match crate::token::encode_identity(identity) {
            Some(encoded) => Ok(encoded),
            None => refuse(format!(
                "of {} bytes is too long: at most {} bytes as stored (a byte other than a letter, \
                 digit, `.`, `-` or `_` takes three)",
                identity.len(),
                crate::token::MAX_IDENTITY_LEN
            )),
        }
    }

    /// The leader `info` names (`None` while its term is not readable yet), or why the name
    /// is not an election's.
    fn of_an_election(&self, info: &crate::LockInfo) -> Result<Option<Leader>, LockError> {
        let other = |what: &str| {
            Err(LockError::Config(format!(
                "`{}` is held as {what}, not by an election's leader: an election needs a name of \
                 its own",
                self.name
            )))
        };
        if info.permits.is_some() {
            return other("a semaphore");
        }
        if !info.readers.is_empty() {
            return other("a read lock");
        }
        let Some(holder) = &info.holder else {
            return other("a lock of another client");
        };
        let Some(identity) = &holder.identity else {
            return other(&format!("a plain lock (by {holder})"));
        };
        // A leader whose term is not readable yet (a store that counts the fencing token in
        // a step of its own after the grant) is not reported until it is.
        Ok(info.fencing_token.map(|term| Leader {
            identity: identity.clone(),
            term,
            since: holder.since,
        }))
    }
}

/// Leading an election: made by [`Election::campaign`]. While it lives, the lock's watchdog
/// renews the lease; [`resign`](Self::resign) hands leadership over at once, and dropping it
/// does the same in the background.
#[must_use = "leadership ends as soon as it is dropped"]
#[derive(Debug)]
pub struct Leadership {
    guard: LockGuard,
    identity: String,
    term: u64,
}

impl Leadership {
    /// This leader's term: strictly greater than every earlier leader's. Pass it with every
    /// write the leader makes, and have the store refuse a term lower than one it has seen: a
    /// leader paused past its lease cannot then overwrite its successor's work.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The identity this candidate campaigned with.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.guard.key()
    }

    /// `true` once leadership is known lost.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Resolves when leadership is lost: the lease could not be renewed in time (the process
    /// was paused or cut off), or the lock was released by force. It never resolves if the
    /// leader resigns first, and does not borrow `self`, so it can race the leader's work.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.guard.lost()
    }

    /// Steps down and waits for the backend to confirm: the next candidate leads within a
    /// round trip. [`LockError::Lost`] if leadership had been lost already.
    pub async fn resign(self) -> Result<(), LockError> {
        tracing::info!(election = %self.guard.key(), identity = %self.identity, term = self.term, "distlock: resigning");
        self.guard.release().await
    }
}

/// Who leads an election, as [`Election::leader`] reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    identity: String,
    term: u64,
    since: SystemTime,
}

impl Leader {
    /// The identity the leader campaigned with.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Its term (the fencing token of its lock).
    pub fn term(&self) -> u64 {
        self.term
    }

    /// When it began leading, by the backend's record where it keeps one (SQL, ZooKeeper,
    /// etcd), else when its winning campaign began, by the leader's own clock.
    pub fn since(&self) -> SystemTime {
        self.since
    }
}
