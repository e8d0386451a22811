//! What a holder's connection shows the server: the lock's name (`GET_LOCK`'s), and the
//! note — fencing token, lease and owner token — held as locks of their own beside it.

use std::time::Duration;

use crate::backend::sql::millis;

/// The longest lock name MySQL 8 takes, and the longest MariaDB's `METADATA_LOCK_INFO` shows.
pub(crate) const NAME_LIMIT: usize = 64;

/// The start of a hashed lock name (see [`lock_name`]).
const HASHED: &str = "distlock#";

/// The start of a note lock's name (see [`note_locks`]).
pub(super) const NOTE: &str = "dl~";

/// How much of the note each note lock carries: `dl~<16 hex>~<digit>~` leaves this much of
/// [`NAME_LIMIT`].
const PART: usize = NAME_LIMIT - NOTE.len() - 16 - 3;

/// The `GET_LOCK` name of the backend name `name` in `database` (see
/// `admin::mysql_lock_name`).
pub(crate) fn lock_name(database: &str, name: &str) -> String {
    crate::admin::mysql_lock_name(database, name)
}

/// Whether `lock` is a hashed name, whose key the table `<table>_names` records.
pub(super) fn is_hashed(lock: &str) -> bool {
    lock.starts_with(HASHED)
}

/// The note of a hold, as the names of the locks that carry it: `<fence or ->~<lease
/// ms>~<owner token>` cut into parts of [`PART`] characters, each the lock
/// `dl~<id>~<i>~<part>` (`id`: the token's last 16 characters, its random part, so that no two
/// holders' note locks share a name).
pub(super) fn note_locks(token: &str, lease: Duration, fence: Option<u64>) -> Vec<String> {
    let fence = fence.map_or_else(|| "-".to_owned(), |f| f.to_string());
    let note = format!("{fence}~{}~{token}", millis(lease));
    let id = note_id(token);
    note.as_bytes()
        .chunks(PART)
        .enumerate()
        .map(|(i, part)| format!("{NOTE}{id}~{i}~{}", String::from_utf8_lossy(part)))
        .collect()
}

/// The id of a holder's note locks: the last 16 characters of its token (hashed when the token
/// is shorter or ends otherwise).
fn note_id(token: &str) -> String {
    match token.get(token.len().saturating_sub(16)..) {
        Some(tail) if tail.len() == 16 && tail.bytes().all(|b| b.is_ascii_hexdigit()) => {
            tail.to_owned()
        }
        _ => format!("{:016x}", crate::admin::advisory_key(token) as u64),
    }
}

/// `text` with each `?` replaced by the next of `params` as a hex literal (`X'…'`): one
/// statement of the text protocol, one round trip (a prepared statement costs another on
/// each connection's first use), with nothing in a value that could be read as SQL.
pub(super) fn sql(text: &str, params: &[&[u8]]) -> String {
    let extra: usize = params.iter().map(|p| 2 * p.len() + 3).sum();
    let mut out = String::with_capacity(text.len() + extra);
    let mut params = params.iter();
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for ch in text.chars() {
        let Some(param) = (ch == '?').then(|| params.next()).flatten() else {
            out.push(ch);
            continue;
        };
        out.push_str("X'");
        for &byte in param.iter() {
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
        out.push('\'');
    }
    out
}

/// What a holder's note says.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Note {
    pub(super) lease: Duration,
    pub(super) fence: Option<u64>,
    pub(super) token: String,
}

/// The note carried by the lock names `locks` of one connection (other names are skipped).
pub(super) fn parse_note<'a>(locks: impl IntoIterator<Item = &'a str>) -> Option<Note> {
    let mut parts: Vec<(u32, &str)> = locks
        .into_iter()
        .filter_map(|lock| {
            let rest = lock.strip_prefix(NOTE)?;
            let (_, rest) = rest.split_once('~')?;
            let (i, part) = rest.split_once('~')?;
            Some((i.parse().ok()?, part))
        })
        .collect();
    parts.sort_unstable();
    let note: String = parts.into_iter().map(|(_, part)| part).collect();
    let mut fields = note.splitn(3, '~');
    let fence = fields.next()?.parse().ok();
    let lease = Duration::from_millis(fields.next()?.parse().ok()?);
    let token = fields.next()?.to_owned();
    Some(Note {
        lease,
        fence,
        token,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_verbatim_when_they_can_be_and_hashed_otherwise() {
        let lock_name = |name: &str| lock_name("", name);
        assert_eq!(lock_name("lock:order:42"), "lock:order:42");
        // Upper case (MySQL 8 compares names case-insensitively), spaces, `~`, too long, empty.
        for name in [
            "lock:Order:42",
            "a b",
            "a~b",
            &"x".repeat(65),
            "",
            "distlock#1",
        ] {
            let hashed = lock_name(name);
            assert!(
                is_hashed(&hashed) && hashed.len() == 25,
                "{name:?}: {hashed}"
            );
        }
        assert_ne!(lock_name("lock:Order:42"), lock_name("lock:order:42"));
        assert_eq!(lock_name(&"x".repeat(64)), "x".repeat(64));
    }

    #[test]
    fn values_become_hex_literals() {
        assert_eq!(
            sql("SELECT GET_LOCK(?, 0) + GET_LOCK(?, 0)", &[b"a'b", b""]),
            "SELECT GET_LOCK(X'612762', 0) + GET_LOCK(X'', 0)"
        );
    }

    #[test]
    fn notes_round_trip_in_parts_that_fit() {
        let token = format!(
            "{}:4242:1763900000123:9f86d081884c7d659a2feaa0c55ad015",
            "h".repeat(64)
        );
        let locks = note_locks(&token, Duration::from_millis(30_000), Some(u64::MAX));
        assert!(
            locks.len() > 1 && locks.iter().all(|l| l.len() <= NAME_LIMIT),
            "{locks:?}"
        );
        let mut shuffled: Vec<&str> = locks.iter().map(String::as_str).rev().collect();
        shuffled.push("lock:order:42");
        assert_eq!(
            parse_note(shuffled),
            Some(Note {
                lease: Duration::from_millis(30_000),
                fence: Some(u64::MAX),
                token: token.clone(),
            })
        );
        let short = note_locks("t1", Duration::from_millis(5), None);
        let note = parse_note(short.iter().map(String::as_str)).unwrap();
        assert_eq!((note.fence, note.token.as_str()), (None, "t1"));
        // Two holders of one process never share a note lock's name.
        let other = token.replace("c55ad015", "c55ad016");
        let theirs = note_locks(&other, Duration::from_millis(30_000), Some(u64::MAX));
        assert!(locks.iter().all(|l| !theirs.contains(l)));
    }
}
