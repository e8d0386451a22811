//! A put that may land after its acquisition gave up. A client that loses its connection
//! resends, once it reconnects, what it had not sent — an acquisition's put among it — while
//! the acquisition has long failed and been left (`attempt::leave`). Such a put would hold the
//! lock for a whole lease under a token nobody holds; the release of a token whose put got no
//! answer therefore looks for it a while longer, and deletes it if it lands.

use std::sync::Arc;
use std::time::Duration;

use super::table_ops::{Left, leave};
use super::{Conn, NatsBackend};

/// How long a release looks for a put that got no answer: a client keeps what it could not
/// send for as long as it reconnects, and a restarted server is back within this.
const LEFTOVER_SEARCH: Duration = Duration::from_secs(60);

impl NatsBackend {
    /// Whether `token`'s acquisition sent a put whose answer never came (forgotten now).
    pub(super) fn was_unanswered(&self, token: &str) -> bool {
        self.unanswered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(token)
    }

    /// Looks for `token`'s put on `name`'s key for [`LEFTOVER_SEARCH`] (often at first, then
    /// every two seconds), and deletes it — expecting its revision, so nothing written since
    /// is touched — if it landed.
    pub(super) fn sweep_later(&self, conn: Arc<Conn>, name: &str, token: &str) {
        let (subject, token) = (self.subject(name), token.to_owned());
        tokio::spawn(async move {
            let give_up = tokio::time::Instant::now() + LEFTOVER_SEARCH;
            let mut pause = Duration::from_millis(100);
            while tokio::time::Instant::now() < give_up {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
                // Its place taken out of the key's table, or its bare token deleted (expecting
                // the revision read, so nothing written since is touched).
                if let Ok(Left::Gone { .. }) = leave(&conn, &subject, &token).await {
                    tracing::debug!(%subject, "distlock: a late put of a left acquisition landed; deleted it");
                    return;
                }
            }
        });
    }
}
