//! What a store remembers for a while, within a bound.

/// Strings a backend remembers for a while — parents it saw, writers that may have marked
/// readers — at most `N`: past that, the memory starts again (what is forgotten costs a request
/// more, or a mark that lapses by itself; never a wrong answer).
#[derive(Default)]
pub(crate) struct Remembered<const N: usize>(std::sync::Mutex<crate::fast_map::FastSet<String>>);

impl<const N: usize> Remembered<N> {
    fn set(&self) -> std::sync::MutexGuard<'_, crate::fast_map::FastSet<String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn insert(&self, value: &str) {
        let mut set = self.set();
        if !set.contains(value) {
            if set.len() >= N {
                set.clear();
            }
            set.insert(value.to_owned());
        }
    }

    #[cfg_attr(
        not(any(feature = "zookeeper", feature = "postgres")),
        allow(dead_code)
    )]
    pub(crate) fn contains(&self, value: &str) -> bool {
        self.set().contains(value)
    }

    /// Forgets `value`; whether it was remembered.
    pub(crate) fn remove(&self, value: &str) -> bool {
        self.set().remove(value)
    }
}
