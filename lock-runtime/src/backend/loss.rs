//! The loss of a session or lease that keeps many locks alive at once (a ZooKeeper session, an
//! etcd lease): one flag, set once, that every lock on it waits on.

use std::sync::OnceLock;

use crate::guard::LostFlag;

/// Why a session can no longer be trusted, once it cannot: a guard's lost flag, with the
/// reason every lock on the session reports.
#[derive(Default)]
pub(crate) struct Loss {
    flag: LostFlag,
    why: OnceLock<String>,
}

impl Loss {
    /// Marks the session lost; the first reason given is kept.
    pub(crate) fn mark(&self, why: String) {
        let _ = self.why.set(why);
        self.flag.set();
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.flag.get()
    }

    /// Resolves with the reason once the session is lost.
    pub(crate) async fn wait(&self) -> String {
        self.flag.wait().await;
        self.why.get().cloned().unwrap_or_default()
    }
}
