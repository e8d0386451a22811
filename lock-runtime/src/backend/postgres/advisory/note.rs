//! What a holder's connection shows the server: the comment every statement of a hold
//! carries (see the module docs), and the advisory-lock functions a hold calls.

use std::time::Duration;

use crate::backend::sql::millis;
use crate::backend::{Kind, LockSpec};

pub(super) fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn unhex(text: &str) -> Option<String> {
    let bytes: Option<Vec<u8>> = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// The comment every statement of a hold carries (see the module docs).
pub(super) fn note(spec: &LockSpec<'_>, fence: Option<u64>) -> String {
    let fence = fence.map_or_else(|| "-".to_owned(), |f| f.to_string());
    let reader = if spec.kind == Kind::Shared { " r" } else { "" };
    format!(
        " /* distlock {} {fence} {} {}{reader} */",
        millis(spec.lease),
        spec.token,
        hex(spec.name)
    )
}

/// What a holder's comment says.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Note {
    pub(super) lease: Duration,
    pub(super) fence: Option<u64>,
    pub(super) token: String,
    pub(super) name: String,
    pub(super) reader: bool,
}

pub(super) fn parse_note(query: &str) -> Option<Note> {
    let start = query.find("/* distlock ")? + "/* distlock ".len();
    let rest = &query[start..];
    let rest = &rest[..rest.find(" */")?];
    let mut parts = rest.split(' ');
    Some(Note {
        lease: Duration::from_millis(parts.next()?.parse().ok()?),
        fence: parts.next()?.parse().ok(),
        token: parts.next()?.to_owned(),
        name: unhex(parts.next()?)?,
        reader: parts.next() == Some("r"),
    })
}

/// The advisory-lock function that takes (`try_`: without waiting) or gives back a hold of
/// `kind`: `pg_try_advisory_lock_shared`, `pg_advisory_unlock`, …
pub(super) fn function(kind: Kind, verb: &str) -> String {
    let shared = if kind == Kind::Shared { "_shared" } else { "" };
    format!("pg_{verb}{shared}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::advisory_key;

    #[test]
    fn notes_round_trip_and_keys_are_stable() {
        let spec = LockSpec {
            name: "lock:order:42 */ drop",
            token: "vm:1:2:ab",
            lease: Duration::from_millis(5_000),
            fencing: true,
            renew: true,
            waiting: false,
            fair: false,
            kind: Kind::Exclusive,
            lock_delay: Duration::ZERO,
        };
        let text = format!("SELECT 1{}", note(&spec, Some(7)));
        assert!(!text[text.find("/*").unwrap() + 2..].contains("*/ drop"));
        assert_eq!(
            parse_note(&text),
            Some(Note {
                lease: Duration::from_millis(5_000),
                fence: Some(7),
                token: "vm:1:2:ab".to_owned(),
                name: "lock:order:42 */ drop".to_owned(),
                reader: false,
            })
        );
        let reader = LockSpec {
            kind: Kind::Shared,
            ..spec
        };
        let text = format!("SELECT 1{}", note(&reader, None));
        let parsed = parse_note(&text).expect("a reader's note");
        assert!(parsed.reader && parsed.fence.is_none());
        assert_eq!(
            function(Kind::Shared, "try_advisory_lock"),
            "pg_try_advisory_lock_shared"
        );
        assert_eq!(
            function(Kind::Exclusive, "advisory_unlock"),
            "pg_advisory_unlock"
        );
        // FNV-1a 64 of "a" (the published test vector).
        assert_eq!(advisory_key("a") as u64, 0xaf63_dc4c_8601_ec8c);
    }
}
