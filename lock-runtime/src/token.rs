//! Owner tokens: the random value that proves who holds a lock.

use std::fmt;

/// A fresh 128-bit value, rendered as 32 lowercase hex digits. Release and renewal compare it
/// atomically, so only the owner that acquired a lock can give it back or extend it.
///
/// Each thread keys a SipHash (a pseudo-random function) with 128 bits from the operating
/// system's CSPRNG once, then hashes a per-thread counter: tokens never repeat, and cannot be
/// predicted without the keys — without a system call per acquisition.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct OwnerToken([u8; 32]);

impl OwnerToken {
    pub(crate) fn generate() -> OwnerToken {
        use std::cell::Cell;
        use std::hash::{BuildHasher, Hasher};
        thread_local! {
            static KEYS: (std::hash::RandomState, std::hash::RandomState, Cell<u64>) = {
                // std's RandomState keys come from the OS RNG; mix in getrandom too, so
                // two threads never share keys even if std reuses per-thread seeds.
                let mut salt = [0u8; 16];
                if getrandom::fill(&mut salt).is_err() {
                    fastrand::Rng::new().fill(&mut salt);
                }
                (std::hash::RandomState::new(), std::hash::RandomState::new(), Cell::new(u64::from_le_bytes(salt[..8].try_into().unwrap_or_default()) ^ u64::from_le_bytes(salt[8..].try_into().unwrap_or_default())))
            };
        }
        let (high, low) = KEYS.with(|(a, b, counter)| {
            let n = counter.get().wrapping_add(1);
            counter.set(n);
            let mut h = a.build_hasher();
            h.write_u64(n);
            let mut l = b.build_hasher();
            l.write_u64(n);
            (h.finish(), l.finish())
        });
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&high.to_be_bytes());
        bytes[8..].copy_from_slice(&low.to_be_bytes());
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [0u8; 32];
        for (i, byte) in bytes.into_iter().enumerate() {
            hex[2 * i] = HEX[usize::from(byte >> 4)];
            hex[2 * i + 1] = HEX[usize::from(byte & 0xf)];
        }
        OwnerToken(hex)
    }

    pub(crate) fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever stored.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Show a prefix only: enough to correlate logs, not enough to forge a release.
        write!(f, "OwnerToken({}…)", &self.as_str()[..8])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_128_bit_hex_and_distinct() {
        let a = OwnerToken::generate();
        let b = OwnerToken::generate();
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn tokens_do_not_repeat_across_threads_or_calls() {
        let mut all = std::collections::HashSet::new();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    (0..10_000)
                        .map(|_| OwnerToken::generate().0)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for thread in threads {
            for token in thread.join().unwrap() {
                assert!(all.insert(token), "a token repeated");
            }
        }
    }
}
