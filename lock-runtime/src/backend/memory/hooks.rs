//! Test support: a simulated latency, and looking into the store or changing it behind a
//! holder's back (for `crate::testing` and the unit tests).

#[cfg(feature = "testing")]
use std::collections::VecDeque;
#[cfg(feature = "testing")]
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::MemoryBackend;
#[cfg(feature = "testing")]
use super::state::WriterLease;

impl MemoryBackend {
    /// Simulates a round trip of `min..=max` for every operation from now on (`None`: off);
    /// test support. Half of it passes before the operation takes effect, half after, like a
    /// request and its reply on a network.
    #[cfg(feature = "testing")]
    pub(crate) fn set_latency(&self, latency: Option<(Duration, Duration)>) {
        let ms = |d: Duration| {
            u64::try_from(d.as_millis())
                .unwrap_or(0)
                .min(u64::from(u32::MAX))
        };
        let packed = latency.map_or(0, |(min, max)| (ms(min) << 32) | ms(max).max(ms(min)));
        self.latency_ms.store(packed, Ordering::Relaxed);
    }

    /// What the store holds for `name`: the owner token and remaining lease (test support).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn peek(&self, name: &str) -> Option<(String, Duration)> {
        let now = Instant::now();
        self.state()
            .locks
            .get(name)
            .filter(|held| held.expires_at > now)
            .map(|held| (held.token.clone(), held.expires_at - now))
    }

    /// The live readers of `name`: token and remaining share, longest first (test support).
    #[cfg(feature = "testing")]
    pub(crate) fn readers_of(&self, name: &str) -> Vec<(String, Duration)> {
        let now = Instant::now();
        let mut readers: Vec<(String, Duration)> = self
            .state()
            .readers
            .get(name)
            .map(|readers| {
                readers
                    .shares
                    .iter()
                    .filter(|(_, until)| **until > now)
                    .map(|(token, until)| (token.clone(), *until - now))
                    .collect()
            })
            .unwrap_or_default();
        readers.sort_by_key(|r| std::cmp::Reverse(r.1));
        readers
    }

    /// How many waiters stand in `name`'s fair queue (test support).
    #[cfg(feature = "testing")]
    pub(crate) fn queued(&self, name: &str) -> usize {
        self.state().queues.get(name).map_or(0, VecDeque::len)
    }

    /// Overwrites or deletes `name` behind its holder's back (test support for fault tests).
    #[cfg(feature = "testing")]
    pub(crate) fn force(&self, name: &str, value: Option<(&str, Duration)>) {
        let mut state = self.state();
        match value {
            Some((token, ttl)) => {
                state.locks.insert(
                    name.to_owned(),
                    WriterLease {
                        token: token.to_owned(),
                        expires_at: Instant::now() + ttl,
                    },
                );
            }
            None => {
                state.locks.remove(name);
            }
        }
    }
}
