//! One acquisition, decided once: what it asks for ([`Params`], the one internal form of a
//! [`LockRequest`](crate::LockRequest) or of the attribute's options) and how it goes
//! ([`Plan`], from the request and the store's [`Capabilities`]). The acquisition, the waiting
//! loop and the guard read the plan; none of them asks the store again.

use std::time::Duration;

use crate::backend::{Capabilities, Hold, Kind, LockSpec};
use crate::error::{Feature, LockError};
use crate::key::LockName;

/// How a guard's lease is kept alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RenewMode {
    /// Not renewed: the lock ends after one lease.
    Off,
    /// A spawned watchdog task renews it (the manual API).
    Spawned,
    /// The caller polls [`LockGuard::until_lost`](crate::LockGuard) next to its work (the
    /// attribute).
    Inline,
    /// One key of several taken together: one watchdog renews them all, started once every
    /// key is held (see [`crate::renew::spawn_set_watchdog`]).
    Set,
}

/// What an acquisition asks for, besides its key and owner token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    pub lease: Duration,
    /// How long to wait for a busy lock (`None`: forever).
    pub wait: Option<Duration>,
    pub renewal: RenewMode,
    pub fencing: bool,
    /// Granted in arrival order through a queue on the server.
    pub fair: bool,
    pub kind: Kind,
    /// `max_hold` in milliseconds (zero: none): renewal stops at grant + this, and the hold is
    /// lost then (checked at least the lease, at most `u32::MAX` ms, by the request).
    pub max_hold_ms: u32,
    /// `lock_delay` in milliseconds (zero: none): the store keeps each hold `lease` + this
    /// after its grant or last renewal, so a holder that stops renewing leaves the key taken
    /// that much longer; a release frees it at once.
    pub lock_delay_ms: u32,
    /// An upgradable read (`LockRequest::upgradable`): a reader's share (`kind` is
    /// [`Kind::Shared`]) that at most one holder of the key has at a time, and that
    /// `LockGuard::upgrade` turns into the write lock.
    pub upgradable: bool,
}

impl Params {
    /// These parameters for one key of a set: renewed by `renewal` (the key's own watchdog
    /// until the set is complete, or the set's), unless renewal is off.
    pub(crate) fn renewed_by(self, renewal: RenewMode) -> Params {
        match self.renewal {
            RenewMode::Off => self,
            _ => Params { renewal, ..self },
        }
    }

    /// How long the store keeps a hold after its grant or last renewal: the lease, plus the
    /// lock-delay (the holder itself counts on the lease alone).
    pub(crate) fn store_lease(&self) -> Duration {
        self.lease + Duration::from_millis(self.lock_delay_ms.into())
    }

    /// What a waiter's attempt asks of the store for `name` with `token`.
    pub(crate) fn spec<'a>(&self, name: &'a LockName, token: &'a str) -> LockSpec<'a> {
        LockSpec {
            name: name.full(),
            token,
            lease: self.store_lease(),
            fencing: self.fencing,
            renew: self.renewal != RenewMode::Off,
            waiting: true,
            fair: self.fair,
            kind: self.kind,
            lock_delay: Duration::from_millis(self.lock_delay_ms.into()),
        }
    }

    /// The hold `token` has, or asks for, on the lock `name` (its backend name).
    pub(crate) fn hold<'a>(&self, name: &'a str, token: &'a str) -> Hold<'a> {
        Hold {
            name,
            token,
            kind: self.kind,
            fair: self.fair,
        }
    }
}

/// How one acquisition goes — and how its guard gives the lock back — decided once by
/// [`Plan::of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// One optimistic attempt before any waiting (only the lock is asked for: on Redis one
    /// `SET NX PX`). Not for a fair request, nor on a store whose busy attempt joins a queue
    /// on the server: its place in line must be taken, and given up, by the waiting.
    pub fast_try: bool,
    /// The one owner of a plain lock: it waits behind this client's other tasks for the key
    /// (so they do not race each other to the server), and its guard gives the lock back to
    /// them first. A reader's share or a permit (held together with others) and a fair lock
    /// (its next in line is the head of the server's queue) wait on the server alone.
    pub local_queue: bool,
    /// With [`local_queue`](Self::local_queue), on a store that hands locks over: the lock
    /// passes from a guard straight to the next task of this client, in one command.
    pub hand_over: bool,
    /// A waiter keeps a place in line on the server between attempts — a store whose waiters
    /// always queue, a fair request, a writer whose waiting marks the lock against new
    /// readers, or a reader that waits in line with them — so an acquisition that ends without
    /// the lock gives its token back.
    pub keeps_place: bool,
    /// The waiter listens for releases before its first attempt. A store whose waiters queue
    /// listens once its attempt has a place in line instead (it is then woken only by the
    /// release that concerns it).
    pub listen_first: bool,
    /// A failed attempt may have written its token after all (its reply lost), so the token is
    /// released; not on a store that undoes a failed attempt itself (Redlock). Such a store
    /// may still be deleting a busy attempt's token after the attempt returned (a node that
    /// did not confirm the undo is chased in the background), so every attempt after a busy
    /// one there carries a fresh token: a late delete of the old one cannot remove the lock
    /// a later attempt took.
    pub leftover: bool,
}

impl Plan {
    /// The plan for a request of `key` with `params` on a store that can do `store`; a
    /// feature the store lacks is [`LockError::Unsupported`], a request no store could serve
    /// (a fair read lock) [`LockError::Config`].
    pub(crate) fn of(params: &Params, store: &Capabilities, key: &str) -> Result<Plan, LockError> {
        // A reader's share or a semaphore's permit: held together with others.
        let shared = params.kind != Kind::Exclusive;
        let wrong = |why: &str| Err(LockError::Config(format!("`{key}`: {why}")));
        if params.fair && params.kind == Kind::Shared {
            return wrong(
                "a read lock cannot be fair (readers do not queue behind each other, and a \
                 waiting writer already stops new readers from joining); drop `fair`",
            );
        }
        if params.fair && shared {
            return wrong(
                "a semaphore cannot be fair (on the stores that queue waiters its waiters are \
                 served in arrival order already); drop `fair`",
            );
        }
        let needs = [
            (params.upgradable, Feature::Upgradable),
            (params.kind == Kind::Shared, Feature::ReadLocks),
            (matches!(params.kind, Kind::Permits(_)), Feature::Semaphores),
            (params.lock_delay_ms > 0, Feature::LockDelay),
            (params.fencing, Feature::Fencing),
            (params.fair, Feature::Fair),
        ];
        for (asked, feature) in needs {
            if asked {
                store.require(feature, Some(key))?;
            }
        }
        let local_queue = !shared && !params.fair;
        Ok(Plan {
            fast_try: !params.fair && !store.queues_waiters,
            local_queue,
            hand_over: local_queue && store.hands_over,
            keeps_place: store.queues_waiters
                || params.fair
                || (!shared && store.marks_waiting_writers)
                || (params.kind == Kind::Shared && store.queues_readers),
            listen_first: !store.queues_waiters,
            leftover: !store.undoes_failed_attempts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(kind: Kind, fair: bool) -> Params {
        Params {
            max_hold_ms: 0,
            lock_delay_ms: 0,
            upgradable: false,
            lease: Duration::from_secs(1),
            wait: None,
            renewal: RenewMode::Spawned,
            fencing: false,
            fair,
            kind,
        }
    }

    const REDIS_LIKE: Capabilities = Capabilities {
        fair: true,
        hands_over: true,
        marks_waiting_writers: true,
        ..Capabilities::every_kind("redis")
    };

    const QUEUEING: Capabilities = Capabilities {
        fair: true,
        queues_waiters: true,
        ..Capabilities::every_kind("zookeeper")
    };

    #[test]
    fn a_plain_lock_tries_once_then_queues_locally_and_hands_over() {
        let plan = Plan::of(&params(Kind::Exclusive, false), &REDIS_LIKE, "k").unwrap();
        assert!(plan.fast_try && plan.local_queue && plan.hand_over && plan.listen_first);
        // A waiting writer marks the lock against new readers: a place to give up.
        assert!(plan.keeps_place);
        assert!(plan.leftover);
    }

    #[test]
    fn readers_and_permits_wait_on_the_server_alone() {
        for kind in [Kind::Shared, Kind::Permits(3)] {
            let plan = Plan::of(&params(kind, false), &REDIS_LIKE, "k").unwrap();
            assert!(plan.fast_try, "{kind:?}");
            assert!(
                !plan.local_queue && !plan.hand_over && !plan.keeps_place,
                "{kind:?}"
            );
        }
    }

    #[test]
    fn a_reader_keeps_its_place_where_readers_wait_in_line() {
        let store = Capabilities {
            queues_readers: true,
            ..REDIS_LIKE
        };
        let plan = Plan::of(&params(Kind::Shared, false), &store, "k").unwrap();
        assert!(plan.fast_try && !plan.local_queue && plan.keeps_place);
        let plan = Plan::of(&params(Kind::Permits(3), false), &store, "k").unwrap();
        assert!(!plan.keeps_place);
    }

    #[test]
    fn a_fair_lock_goes_straight_into_the_servers_queue() {
        let plan = Plan::of(&params(Kind::Exclusive, true), &REDIS_LIKE, "k").unwrap();
        assert!(!plan.fast_try && !plan.local_queue && !plan.hand_over && plan.keeps_place);
    }

    #[test]
    fn a_queueing_store_never_tries_first_and_listens_once_in_line() {
        let plan = Plan::of(&params(Kind::Exclusive, false), &QUEUEING, "k").unwrap();
        assert!(!plan.fast_try && !plan.listen_first && plan.keeps_place);
        assert!(plan.local_queue && !plan.hand_over);
    }

    #[test]
    fn refusals_are_typed_and_say_why() {
        let plain = Capabilities::plain("redlock");
        let unsupported = |params: Params, caps: &Capabilities| match Plan::of(&params, caps, "k") {
            Err(LockError::Unsupported {
                backend,
                feature,
                key,
                reason,
            }) => {
                assert_eq!((backend, key.as_deref()), ("redlock", Some("k")));
                (feature, reason)
            }
            other => panic!("{:?}", other.map(|_| ())),
        };
        let (feature, why) = unsupported(params(Kind::Exclusive, true), &plain);
        assert_eq!(feature, Feature::Fair);
        assert!(why.contains("arrival order"), "{why}");
        let (feature, why) = unsupported(params(Kind::Shared, false), &plain);
        assert_eq!(feature, Feature::ReadLocks);
        assert!(why.contains("no read locks"), "{why}");
        let wrong = |params: Params| match Plan::of(&params, &REDIS_LIKE, "k") {
            Err(LockError::Config(why)) => why,
            other => panic!("{:?}", other.map(|_| ())),
        };
        assert!(wrong(params(Kind::Shared, true)).contains("a read lock cannot be fair"));
        assert!(wrong(params(Kind::Permits(2), true)).contains("a semaphore cannot be fair"));
    }
}
