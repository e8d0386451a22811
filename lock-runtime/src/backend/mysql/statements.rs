//! The SQL the MySQL / MariaDB backend runs, with the table names filled in. Every time comes
//! from the database's clock in UTC (`UTC_TIMESTAMP(6)`, fixed for one statement), never the
//! client's, and never a session time zone.

use crate::backend::sql::shares::READERS;
use crate::backend::sql::{SqlSettings, quoted};

/// The statements for one lock table.
pub(super) struct MyStatements {
    /// Both tables, created if missing.
    pub create: [String; 2],
    /// `name, token, lease µs, holder` → affected rows: 1 inserted, 2 taken over (the old row
    /// expired, or it is already ours: a retried attempt), 0 busy. One statement: the update
    /// branch compares the old row and changes nothing unless it may take it.
    pub acquire: String,
    /// `name` → the holder's remaining lease in µs, and the row's token (`readers` when
    /// readers hold it, `permits:<n>` for a semaphore's permits).
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
    /// Read locks (see [`MyStatements::readers`]): `name` → locks the lock row (made, expired, if
    /// missing) for the transaction.
    pub lock_row: String,
    /// `name` → (token, live, remaining µs) of the locked lock row.
    pub row: String,
    /// `name, name, name, token, name` → (token, live, remaining µs, live writers' marks, this
    /// reader's live share) of the lock row, read without locking anything: a reader's attempt
    /// that is plainly busy answers from it, without a transaction on the hot row.
    pub peek: String,
    /// `name, name, name, token, name` → (token, live, remaining µs, live shares, this
    /// holder's live share) of the lock row, read without locking anything: a semaphore's
    /// request that is plainly busy (every permit live) or refused answers from it.
    pub peek_permits: String,
    /// `name, name` → (live rows, µs until the last/first ends) among a lock's shares (bounds
    /// `0x01`, `0x02`) or writers' marks (`0x02`, `0x03`): see `shares` and `marks`.
    pub shares: String,
    pub marks: String,
    /// `name, token` → 1 if that reader's share is live.
    pub share_live: String,
    /// `name, token, token, lease µs, holder` → the reader's share, made or renewed.
    pub put_share: String,
    /// `row token ×2, lease µs ×2, row token ×2, name` → the lock row held by readers (row
    /// token `readers`) or a semaphore's permits (`permits:<n>`), living at least `lease` more.
    pub readers_row: String,
    /// `µs, name, row token` → the shares' row ends in that long (0: its lease over, left to
    /// writers).
    pub readers_until: String,
    /// `name, token` → deletes a reader's share (`name, token`), and `name, name` → the expired
    /// shares of crashed readers.
    pub drop_share: String,
    pub drop_expired_shares: String,
    /// `name, row token` → deletes the readers' (or permits') row.
    pub drop_readers_row: String,
    /// `name, name` → deletes every share and mark of a lock (a forced release).
    pub drop_shares: String,
    /// `name, token, token, lapse µs, holder, name` → a waiting writer's mark, if readers hold.
    pub mark: String,
    /// `name, token` → deletes a writer's mark.
    pub unmark: String,
    /// `name` → the last write grant's fencing token.
    pub last_fence: String,
    /// Admin: `name, name` → (token, remaining ms) of a lock's live shares, longest first.
    pub readers: String,
    /// Admin: `name` → the live row: (name, token, holder, acquired ms, remaining ms, fence).
    pub inspect: String,
    /// Admin: `LIKE pattern, limit` → live rows as in `inspect`, by name.
    pub list: String,
    /// Admin: `name, token` → deletes the row if it still holds that token (a forced release
    /// deletes exactly the row it showed).
    pub force_release: String,
}

/// The DDL, as printed in the guide (`distlock::guide::mysql`).
pub(crate) fn my_ddl(table: &str, fence_table: &str) -> [String; 2] {
    let (t, f) = (quoted(table, '`'), quoted(fence_table, '`'));
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

impl MyStatements {
    pub(super) fn new(settings: &SqlSettings) -> MyStatements {
        let t = quoted(&settings.table, '`');
        let f = quoted(&settings.fence_table(), '`');
        // The assignments of `ON DUPLICATE KEY UPDATE` run left to right, each seeing the
        // ones before: `token` is decided from the old row, then `expires_at` follows it.
        // Times in ms: since the epoch (the stored UTC datetime, read without a time zone),
        // and until the lease ends.
        let columns = "l.name, l.token, l.holder, \
            CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', l.acquired_at) DIV 1000 AS SIGNED), \
            CAST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.expires_at) DIV 1000 AS SIGNED), \
            f.fence";
        let may_take = "expires_at <= UTC_TIMESTAMP(6) OR token = VALUES(token)";
        MyStatements {
            create: my_ddl(&settings.table, &settings.fence_table()),
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
                "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), token \
                 FROM {t} WHERE name = ?"
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
WHERE l.name LIKE ? AND l.expires_at > UTC_TIMESTAMP(6)
  AND INSTR(l.name, x'01') = 0 AND INSTR(l.name, x'02') = 0
ORDER BY l.name LIMIT ?"
            ),
            force_release: format!("DELETE FROM {t} WHERE name = ? AND token = ?"),
            lock_row: format!(
                "INSERT INTO {t} (name, token, expires_at, holder, acquired_at)
VALUES (?, '{READERS}', UTC_TIMESTAMP(6) - INTERVAL 1 SECOND, '{READERS}', UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE name = name"
            ),
            row: format!(
                "SELECT token, expires_at > UTC_TIMESTAMP(6),
       CAST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) AS SIGNED)
FROM {t} WHERE name = ? FOR UPDATE"
            ),
            peek: MyStatements::peek(&t, "x'02'", "x'03'"),
            peek_permits: MyStatements::peek(&t, "x'01'", "x'02'"),
            shares: MyStatements::range(&t, "MAX", "x'01'", "x'02'"),
            marks: MyStatements::range(&t, "MIN", "x'02'", "x'03'"),
            share_live: format!(
                "SELECT COUNT(*) FROM {t}
WHERE name = CONCAT(?, x'01', ?) AND expires_at > UTC_TIMESTAMP(6) FOR UPDATE"
            ),
            put_share: format!(
                "INSERT INTO {t} (name, token, expires_at, holder, acquired_at)
VALUES (CONCAT(?, x'01', ?), ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)"
            ),
            readers_row: format!(
                "UPDATE {t} SET
    acquired_at = IF(token = ? AND expires_at > UTC_TIMESTAMP(6), acquired_at,
                     UTC_TIMESTAMP(6)),
    expires_at = IF(token = ? AND expires_at > UTC_TIMESTAMP(6),
                    GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND),
                    UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND),
    token = ?, holder = ?
WHERE name = ?"
            ),
            readers_until: format!(
                "UPDATE {t} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE name = ? AND token = ?"
            ),
            drop_share: format!("DELETE FROM {t} WHERE name = CONCAT(?, x'01', ?)"),
            drop_expired_shares: format!(
                "DELETE FROM {t} WHERE name > CONCAT(?, x'01') AND name < CONCAT(?, x'02')
  AND expires_at <= UTC_TIMESTAMP(6)"
            ),
            drop_readers_row: format!("DELETE FROM {t} WHERE name = ? AND token = ?"),
            drop_shares: format!(
                "DELETE FROM {t} WHERE name > CONCAT(?, x'01') AND name < CONCAT(?, x'03')"
            ),
            mark: format!(
                "INSERT INTO {t} (name, token, expires_at, holder, acquired_at)
SELECT CONCAT(?, x'02', ?), ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, UTC_TIMESTAMP(6)
FROM {t} m WHERE m.name = ? AND m.token = '{READERS}'
ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)"
            ),
            unmark: format!("DELETE FROM {t} WHERE name = CONCAT(?, x'02', ?)"),
            last_fence: format!("SELECT fence FROM {f} WHERE name = ?"),
            readers: format!(
                "SELECT token,
       CAST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) DIV 1000 AS SIGNED)
FROM {t} WHERE name > CONCAT(?, x'01') AND name < CONCAT(?, x'02')
  AND expires_at > UTC_TIMESTAMP(6)
ORDER BY expires_at DESC"
            ),
            table: t,
        }
    }

    /// `name, name` → (live rows, `extreme` of their remaining µs) among the rows of one lock
    /// whose names lie strictly between `name + low` and `name + high`, locked.
    ///
    /// Read locks keep the table's layout. The lock row `name` of a key held by readers has the
    /// token `readers` and lives until the longest share ends, so a writer's plain acquisition
    /// finds it busy; each reader's share is a row `name + 0x01 + token` with its own lease, and
    /// each writer waiting for the readers to leave marks the lock with a row
    /// `name + 0x02 + token` (new readers stay out while one lives). Every reader operation
    /// runs in a transaction that first locks the lock row, so they are serialised per key.
    /// An unlocked read of a lock row (the statements `peek` and `peek_permits`), counting
    /// its live rows between bounds `low` and `high` (writers' marks, or shares).
    fn peek(t: &str, low: &str, high: &str) -> String {
        format!(
            "SELECT m.token, m.expires_at > UTC_TIMESTAMP(6),
       CAST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), m.expires_at) AS SIGNED),
       (SELECT COUNT(*) FROM {t} w WHERE w.name > CONCAT(?, {low}) AND w.name < CONCAT(?, {high})
          AND w.expires_at > UTC_TIMESTAMP(6)),
       (SELECT COUNT(*) FROM {t} s WHERE s.name = CONCAT(?, x'01', ?)
          AND s.expires_at > UTC_TIMESTAMP(6))
FROM {t} m WHERE m.name = ?"
        )
    }

    fn range(t: &str, extreme: &str, low: &str, high: &str) -> String {
        format!(
            "SELECT COUNT(*),
       CAST({extreme}(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)) AS SIGNED)
FROM {t} WHERE name > CONCAT(?, {low}) AND name < CONCAT(?, {high})
  AND expires_at > UTC_TIMESTAMP(6) FOR UPDATE"
        )
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
