//! Lock key validation.

use crate::error::LockError;

/// The longest lock key accepted, in bytes, prefix excluded. Keys are sent on every acquire,
/// renew and release; a key this long is almost always a bug (a serialized struct, a body).
pub(crate) const MAX_KEY_LEN: usize = 1024;

/// Checks a user-supplied lock key: non-empty, at most [`MAX_KEY_LEN`] bytes, no control
/// characters (they break log lines and `redis-cli`).
pub(crate) fn validate_key(key: &str) -> Result<(), LockError> {
    let reason = if key.is_empty() {
        "the key is empty; build it from the data the lock protects, e.g. `order:42`".to_string()
    } else if key.len() > MAX_KEY_LEN {
        format!(
            "the key is {} bytes long, more than the limit of {MAX_KEY_LEN}; \
             lock on an id or a hash of the data instead",
            key.len()
        )
    } else if let Some(c) = key.chars().find(|c| c.is_control()) {
        format!("the key contains the control character {c:?}; use printable characters only")
    } else {
        return Ok(());
    };
    Err(LockError::InvalidKey {
        key: shorten(key),
        reason,
    })
}

/// A lock's backend name (`<prefix><key>`, or `{<prefix><key>}` in a Redis Cluster) with the
/// user's key inside it: one allocation for both, made from the key's own buffer.
#[derive(Clone)]
pub(crate) struct LockName {
    full: String,
    key: std::ops::Range<usize>,
}

impl LockName {
    pub(crate) fn new(mut key: String, prefix: &str, hash_tag: bool) -> LockName {
        let len = key.len();
        let start = prefix.len() + usize::from(hash_tag);
        key.reserve_exact(start + usize::from(hash_tag));
        key.insert_str(0, prefix);
        if hash_tag {
            // Redis Cluster: `{lock:K}`, so the lock and its fencing counter share a slot.
            key.insert(0, '{');
            key.push('}');
        }
        LockName {
            full: key,
            key: start..start + len,
        }
    }

    /// The backend key, prefix included.
    pub(crate) fn full(&self) -> &str {
        &self.full
    }

    /// The user's key.
    pub(crate) fn key(&self) -> &str {
        &self.full[self.key.clone()]
    }
}

/// A key short enough to print in an error message.
fn shorten(key: &str) -> String {
    const SHOWN: usize = 64;
    if key.len() <= SHOWN {
        return key.escape_debug().to_string();
    }
    let mut end = SHOWN;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", key[..end].escape_debug())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_keys() {
        assert!(validate_key("order:42").is_ok());
        assert!(validate_key("ünïcødé/κλειδί").is_ok());
        assert!(validate_key(&"k".repeat(MAX_KEY_LEN)).is_ok());
    }

    #[test]
    fn rejects_empty_oversized_and_control_keys_with_a_reason() {
        let err = validate_key("").unwrap_err().to_string();
        assert!(err.contains("empty"), "{err}");
        let err = validate_key(&"é".repeat(MAX_KEY_LEN))
            .unwrap_err()
            .to_string();
        assert!(err.contains("2048 bytes"), "{err}");
        assert!(
            err.len() < 400,
            "oversized key must be shortened in the message: {err}"
        );
        let err = validate_key("a\nb").unwrap_err().to_string();
        assert!(err.contains("control character"), "{err}");
    }

    #[test]
    fn lock_names_wrap_the_key() {
        let plain = LockName::new("order:42".into(), "lock:", false);
        assert_eq!((plain.full(), plain.key()), ("lock:order:42", "order:42"));
        let tagged = LockName::new("é{x}".into(), "lock:", true);
        assert_eq!((tagged.full(), tagged.key()), ("{lock:é{x}}", "é{x}"));
        let bare = LockName::new("k".into(), "", false);
        assert_eq!((bare.full(), bare.key()), ("k", "k"));
    }
}
