//! What a client last heard of the keys it asked for: an acquisition of a key heard free — or
//! never heard of — puts at once, expecting the revision that freed it (or none), instead of
//! reading the key first. News are hints: a put they misled is refused by the server (it
//! expects a revision that is not the key's last), and the acquisition then reads the key.

use std::sync::Mutex;
use std::time::Duration;

use super::NatsBackend;
use crate::fast_map::FastMap;

/// What a client last heard of a key it asked for.
#[derive(Clone, Copy)]
pub(super) enum News {
    /// Held by another: an acquisition reads the key first (its put would be refused).
    Held,
    /// Freed by the write of this revision (this client's release, or a republished delete
    /// or expiry marker), at that instant.
    Freed(u64, tokio::time::Instant),
}

/// How many keys' [`News`] a client keeps at most (forgotten all at once past it: news are
/// hints, and a key without any is tried as absent).
const NEWS_KEPT: usize = 4_096;

impl NatsBackend {
    /// The revision an acquisition of `name` may put over without reading the key first: the
    /// one whose write freed it (a delete stays a second: after that the key has none), or
    /// none (0) for a key this client has heard nothing of; `None` for a key heard held. News
    /// of a freed key is taken: whatever the put finds, it is news no more.
    pub(super) fn expected_free(&self, name: &str) -> Option<u64> {
        let mut news = self.news.lock().unwrap_or_else(|p| p.into_inner());
        match news.get(name).copied() {
            None => Some(0),
            Some(News::Held) => None,
            Some(News::Freed(revision, at)) => {
                news.remove(name);
                let marker_left = at.elapsed() < Duration::from_millis(800);
                Some(if marker_left { revision } else { 0 })
            }
        }
    }

    pub(super) fn hear(&self, name: &str, news: Option<News>) {
        hear(&self.news, name, news, true);
    }
}

/// Records `news` of key `name` (`None`: forgets it) — of a key not asked for before only if
/// `new`.
pub(super) fn hear(kept: &Mutex<FastMap<String, News>>, name: &str, news: Option<News>, new: bool) {
    let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
    match news {
        None => {
            kept.remove(name);
        }
        Some(news) => {
            if let Some(old) = kept.get_mut(name) {
                *old = news;
            } else if new {
                if kept.len() >= NEWS_KEPT {
                    kept.clear();
                }
                kept.insert(name.to_owned(), news);
            }
        }
    }
}
