//! The SQL the MySQL / MariaDB backend runs, with the table names filled in. Every time comes
//! from the database's clock in UTC (`UTC_TIMESTAMP(6)`, fixed for one statement), never the
//! client's, and never a session time zone.

use crate::backend::sql::SqlSettings;

/// The statements for one lock table.
pub(super) struct Sql {
    /// Both tables, created if missing.
    pub create: [String; 2],
    /// `name, token, lease µs, holder` → affected rows: 1 inserted, 2 taken over (the old row
    /// expired, or it is already ours: a retried attempt), 0 busy. One statement: the update
    /// branch compares the old row and changes nothing unless it may take it.
    pub acquire: String,
    /// `name` → the holder's remaining lease in µs.
    pub remaining: String,
    /// `name` → the new fencing token, through `LAST_INSERT_ID(expr)`.
    pub fence: String,
    /// `lease µs, name, token` → 1 if renewed.
    pub renew: String,
    /// `name, token` → 1 if it was ours and unexpired.
    pub release: String,
    /// `name, token` → deletes our own row after its lease ran out (nobody took it over).
    pub release_expired: String,
    /// The quoted lock table, for the batched renewal built per batch size.
    pub table: String,
    /// Admin: `name` → the live row: (name, token, holder, acquired ms, remaining ms, fence).
    pub inspect: String,
    /// Admin: `LIKE pattern, limit` → live rows as in `inspect`, by name.
    pub list: String,
    /// Admin: `name, token` → deletes the row if it still holds that token (a forced release
    /// deletes exactly the row it showed).
    pub force_release: String,
}

/// `` `schema`.`table` `` or `` `table` `` (names are checked to be letters, digits and `_`).
fn quoted(table: &str) -> String {
    table
        .split('.')
        .map(|part| format!("`{part}`"))
        .collect::<Vec<_>>()
        .join(".")
}

/// The DDL, as printed in the README.
pub(crate) fn ddl(table: &str, fence_table: &str) -> [String; 2] {
    let (t, f) = (quoted(table), quoted(fence_table));
    [
        format!(
            "CREATE TABLE IF NOT EXISTS {t} (
    name        VARBINARY(2048) NOT NULL PRIMARY KEY,
    token       VARCHAR(255) CHARACTER SET ascii NOT NULL,
    expires_at  DATETIME(6) NOT NULL,
    holder      VARCHAR(255) NOT NULL,
    acquired_at DATETIME(6) NOT NULL
) ENGINE=InnoDB"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {f} (
    name  VARBINARY(2048) NOT NULL PRIMARY KEY,
    fence BIGINT NOT NULL
) ENGINE=InnoDB"
        ),
    ]
}

impl Sql {
    pub(super) fn new(settings: &SqlSettings) -> Sql {
        let t = quoted(&settings.table);
        let f = quoted(&settings.fence_table());
        // The assignments of `ON DUPLICATE KEY UPDATE` run left to right, each seeing the
        // ones before: `token` is decided from the old row, then `expires_at` follows it.
        // Times in ms: since the epoch (the stored UTC datetime, read without a time zone),
        // and until the lease ends.
        let columns = "l.name, l.token, l.holder, \
            CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', l.acquired_at) DIV 1000 AS SIGNED), \
            CAST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.expires_at) DIV 1000 AS SIGNED), \
            f.fence";
        let may_take = "expires_at <= UTC_TIMESTAMP(6) OR token = VALUES(token)";
        Sql {
            create: ddl(&settings.table, &settings.fence_table()),
            acquire: format!(
                "INSERT INTO {t} (name, token, expires_at, holder, acquired_at)
VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
    holder = IF({may_take}, VALUES(holder), holder),
    acquired_at = IF({may_take}, VALUES(acquired_at), acquired_at),
    token = IF({may_take}, VALUES(token), token),
    expires_at = IF(token = VALUES(token), VALUES(expires_at), expires_at)"
            ),
            remaining: format!(
                "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) FROM {t} \
                 WHERE name = ?"
            ),
            fence: format!(
                "INSERT INTO {f} (name, fence) VALUES (?, LAST_INSERT_ID(1))
ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1)"
            ),
            renew: format!(
                "UPDATE {t} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE name = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)"
            ),
            release: format!(
                "DELETE FROM {t} WHERE name = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)"
            ),
            release_expired: format!("DELETE FROM {t} WHERE name = ? AND token = ?"),
            inspect: format!(
                "SELECT {columns} FROM {t} l LEFT JOIN {f} f ON f.name = l.name
WHERE l.name = ? AND l.expires_at > UTC_TIMESTAMP(6)"
            ),
            list: format!(
                "SELECT {columns} FROM {t} l LEFT JOIN {f} f ON f.name = l.name
WHERE l.name LIKE ? AND l.expires_at > UTC_TIMESTAMP(6) ORDER BY l.name LIMIT ?"
            ),
            force_release: format!("DELETE FROM {t} WHERE name = ? AND token = ?"),
            table: t,
        }
    }

    /// Renews `n` locks of one lease: `lease µs, (name, token) × n`.
    pub(super) fn renew_many(&self, n: usize) -> String {
        let pairs = vec!["(?, ?)"; n].join(", ");
        format!(
            "UPDATE {} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE expires_at > UTC_TIMESTAMP(6) AND (name, token) IN ({pairs})",
            self.table
        )
    }

    /// Which of `n` locks are still ours and unexpired: `(name, token) × n` → names.
    pub(super) fn still_ours(&self, n: usize) -> String {
        let pairs = vec!["(?, ?)"; n].join(", ");
        format!(
            "SELECT name FROM {} WHERE expires_at > UTC_TIMESTAMP(6) AND (name, token) IN \
             ({pairs})",
            self.table
        )
    }
}
