//! A shared result on a store that expires nothing by itself to the millisecond (ZooKeeper's
//! persistent nodes, etcd's whole-second leases): the value stored after the instant it
//! expires, in unix milliseconds by the writing client's clock, which a reader compares with
//! its own.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Unix milliseconds now, by this client's clock.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `value` dated to expire `ttl` from now.
pub(crate) fn dated(value: &[u8], ttl: Duration) -> Vec<u8> {
    let until = now_ms().saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
    let mut stored = Vec::with_capacity(8 + value.len());
    stored.extend_from_slice(&until.to_le_bytes());
    stored.extend_from_slice(value);
    stored
}

/// The value of `stored` (made by [`dated`]) if it has not expired.
pub(crate) fn live(stored: &[u8]) -> Option<Vec<u8>> {
    let (until, value) = stored.split_at_checked(8)?;
    let until = u64::from_le_bytes(until.try_into().ok()?);
    (now_ms() < until).then(|| value.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dated_value_lives_until_its_ttl() {
        let stored = dated(b"abc", Duration::from_secs(60));
        assert_eq!(live(&stored).as_deref(), Some(&b"abc"[..]));
        assert_eq!(live(&dated(b"abc", Duration::ZERO)), None);
        assert_eq!(live(b"short"), None);
    }
}
