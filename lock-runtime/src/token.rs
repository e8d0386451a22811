//! Owner tokens: the random value that proves who holds a lock.

use std::fmt;

/// A fresh 128-bit random value, drawn from the operating system's CSPRNG, rendered as 32
/// lowercase hex digits. Release and renewal compare it atomically, so only the owner that
/// acquired a lock can give it back or extend it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct OwnerToken(String);

impl OwnerToken {
    pub(crate) fn generate() -> OwnerToken {
        let mut bytes = [0u8; 16];
        if getrandom::fill(&mut bytes).is_err() {
            // The OS RNG is unavailable only on exotic platforms; fall back to a seeded
            // generator so locking still works. Tokens need uniqueness, not secrecy.
            let mut rng = fastrand::Rng::new();
            rng.fill(&mut bytes);
        }
        let mut hex = String::with_capacity(32);
        for byte in bytes {
            hex.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
            hex.push(char::from_digit(u32::from(byte & 0xf), 16).unwrap_or('0'));
        }
        OwnerToken(hex)
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Show a prefix only: enough to correlate logs, not enough to forge a release.
        write!(f, "OwnerToken({}…)", &self.0[..8])
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
}
