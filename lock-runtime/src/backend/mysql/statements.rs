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
    /// Read locks (see [`share_state`] for the layout): `name` → locks the lock row
    /// (made, expired, if missing) for the transaction.
    pub lock_row: String,
    /// `name, name, name, token, name` → (token, live, remaining µs, live writers' marks, this
    /// reader's live share) of the lock row, read without locking anything: a reader's attempt
    /// that is plainly busy answers from it, without a transaction on the hot row.
    pub peek: String,
    /// `name, name, name, token, name` → (token, live, remaining µs, live shares, this
    /// holder's live share) of the lock row, read without locking anything: a semaphore's
    /// request that is plainly busy (every permit live) or refused answers from it.
    pub peek_permits: String,
    /// In a share's acquisition, once `lock_row` holds the lock row: `:name, :token` →
    /// (token, live, remaining µs, this share live, live rows that keep a new share out, µs
    /// until the first (marks) or last (permits) of them ends) — the waiting writers' marks
    /// (`marks_state`, for readers) or the live permits (`permits_state`). One range scan
    /// over the lock row and its shares and marks (see [`share_state`]).
    pub marks_state: String,
    pub permits_state: String,
    /// `:name, :token` → locks the lock row `name` with its shares and marks and reads (token,
    /// live, this share live, the other live shares, µs until the last of them ends, live
    /// writers' marks): what a share's renewal and release decide on. One row even without a
    /// lock row (its token and liveness then `NULL`).
    pub share_locked: String,
    /// [`share_locked`](Self::share_locked) without locking anything: an upgrade that waits
    /// for readers reads it between the attempts that mark the lock.
    pub share_peek: String,
    /// `name, token, token, lease µs, holder, name, row token, lease µs, row token ×5,
    /// token` → the share made or renewed and the lock row held by its shares (row token
    /// `readers`, or a semaphore's `permits:<n>`) living at least as long: one statement.
    pub take_share: String,
    /// A lone share (see [`share_alone`]): `name, row token, lease µs, token, name, token,
    /// token, lease µs, holder` → the lock row and the share in one plain `INSERT` (2 rows), or
    /// a duplicate-key error when the lock row exists in any state.
    pub share_alone: String,
    /// `name, token, name, row token, token` → deletes a lone share and its lock row (2 rows)
    /// while the lock row still names that share alone and both are live; 0 rows otherwise.
    pub leave_alone: String,
    /// `name` → the lock row held by readers stops naming a lone share (a writer marked it):
    /// that share's release then takes the full path, which leaves the row to the writer.
    pub not_alone: String,
    /// The procedures that take and give back a share, and upgrade an upgradable one, in one
    /// round trip each, created with the tables where the user may (see [`procedures`]);
    /// without them the statements above do it.
    pub procedures: [String; 3],
    /// `name, token, row token, lease µs, holder, permits?, full at, fence (0 none, 1 the last
    /// write grant's, 2 a new one)` → (0 taken, 1 busy, 2 held as another token; the lock
    /// row's token, live, remaining µs; µs until the first mark ends; the fencing token).
    pub call_take: String,
    /// `name, token, row token` → (the share was live, shares are left).
    pub call_give: String,
    /// `name, token, holder, lease µs, mark µs, fencing?` → (0 upgraded, 1 busy, 2 the share
    /// is gone; the fencing token if upgraded; µs until the other shares end if busy).
    pub call_upgrade: String,
    /// `µs, name, row token` → the shares' row ends in that long (0: its lease over, left to
    /// writers).
    pub readers_until: String,
    /// `name, name, name, token` → deletes a share (`name, token`) and the expired shares of
    /// crashed holders.
    pub drop_share: String,
    /// `name, row token, name, name, name, token` → `drop_share` and the shares' row with it
    /// (the last share's release, no writer waiting).
    pub drop_last_share: String,
    /// `name, name` → deletes every share and mark of a lock (a forced release).
    pub drop_shares: String,
    /// `name, token, token, lapse µs, holder, name` → a waiting writer's mark, if readers hold.
    pub mark: String,
    /// `name, token` → deletes a writer's mark.
    pub unmark: String,
    /// `name` → the last write grant's fencing token.
    pub last_fence: String,
    /// `name, name, name, token` → the live upgradable shares (`^…`) other than `token`'s: a
    /// second one is refused.
    pub other_upgradable: String,
    /// `token, holder, lease µs, name` → the readers' lock row becomes the writer's (an
    /// upgradable share's upgrade, once its share is alone).
    pub upgrade_row: String,
    /// `token, holder, lease µs, name, token` → an upgradable share alone on its lock (the lock
    /// row, live and held by readers, names it alone: see [`share_alone`]) upgraded by one
    /// single-row `UPDATE`: the lock row becomes the writer's. 1 row if upgraded; 0 otherwise
    /// (another reader joined, a writer marked the lock, the share was taken with fencing, or
    /// it is gone), and the full upgrade decides. The share row is left as it is: shares count
    /// only under a lock row held by readers, it ends no later than the writer's lock row (its
    /// lease was set no later, and only the lock row is renewed from now on), and the upgraded
    /// lock's release (and a forced release) deletes it with the lock row. A statement that
    /// also ended the share row would join the table to itself, which MariaDB runs at about
    /// five times the cost of this one.
    pub upgrade_alone: String,
    /// `name, token, name, token` → an upgraded lock's release: its lock row while ours and
    /// live, with the share row [`upgrade_alone`](Self::upgrade_alone) left, if any (rows
    /// deleted > 0 if it was still held).
    pub release_upgraded: String,
    /// `name, name, token, token` → an upgraded lock's rows after its lease ran out (nobody
    /// took the lock row over).
    pub release_upgraded_expired: String,
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
        // Named after the table (at most 56 characters) and the procedure's version.
        let take = quoted(&format!("{}_sacq2", settings.table), '`');
        let give = quoted(&format!("{}_srel2", settings.table), '`');
        let upgrade = quoted(&format!("{}_supg1", settings.table), '`');
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
            fence: fence(&f, "?"),
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
            lock_row: lock_row(&t, "?"),
            peek: MyStatements::peek(&t, "x'02'", "x'03'"),
            peek_permits: MyStatements::peek(&t, "x'01'", "x'02'"),
            marks_state: share_state(&t, Shares::Marks, [":name", ":token"], ""),
            permits_state: share_state(&t, Shares::Permits, [":name", ":token"], ""),
            share_locked: share_state(&t, Shares::Others, [":name", ":token"], " FOR UPDATE"),
            share_peek: share_state(&t, Shares::Others, [":name", ":token"], ""),
            take_share: take_share(&t, ["?"; 5]),
            share_alone: share_alone(&t),
            leave_alone: format!(
                "DELETE l, s FROM {t} l
JOIN {t} s ON s.name = CONCAT(?, x'01', ?) AND s.expires_at > UTC_TIMESTAMP(6)
WHERE l.name = ? AND l.token = ? AND l.holder = ? AND l.expires_at > UTC_TIMESTAMP(6)"
            ),
            not_alone: format!(
                "UPDATE {t} SET holder = '{READERS}'
WHERE name = ? AND token = '{READERS}' AND holder <> '{READERS}'"
            ),
            procedures: procedures(&t, &f, [&take, &give, &upgrade]),
            call_take: format!("CALL {take}(?, ?, ?, ?, ?, ?, ?, ?)"),
            call_give: format!("CALL {give}(?, ?, ?)"),
            call_upgrade: format!("CALL {upgrade}(?, ?, ?, ?, ?, ?)"),
            readers_until: format!(
                "UPDATE {t} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE name = ? AND token = ?"
            ),
            drop_share: format!(
                "DELETE FROM {t} WHERE name > CONCAT(?, x'01') AND name < CONCAT(?, x'02')
  AND (name = CONCAT(?, x'01', ?) OR expires_at <= UTC_TIMESTAMP(6))"
            ),
            drop_last_share: format!(
                "DELETE FROM {t} WHERE (name = ? AND token = ?)
  OR (name > CONCAT(?, x'01') AND name < CONCAT(?, x'02')
      AND (name = CONCAT(?, x'01', ?) OR expires_at <= UTC_TIMESTAMP(6)))"
            ),
            drop_shares: format!(
                "DELETE FROM {t} WHERE name > CONCAT(?, x'01') AND name < CONCAT(?, x'03')"
            ),
            mark: mark(&t, ["?"; 4]),
            unmark: format!("DELETE FROM {t} WHERE name = CONCAT(?, x'02', ?)"),
            last_fence: format!("SELECT fence FROM {f} WHERE name = ?"),
            other_upgradable: format!(
                "SELECT CAST(COUNT(*) AS SIGNED) FROM {t}
WHERE name > CONCAT(?, x'01', '^') AND name < CONCAT(?, x'01', '_')
  AND name <> CONCAT(?, x'01', ?) AND expires_at > UTC_TIMESTAMP(6)"
            ),
            upgrade_row: upgrade_row(&t, ["?"; 4]),
            upgrade_alone: format!(
                "UPDATE {t} SET token = ?, holder = ?,
    expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, acquired_at = UTC_TIMESTAMP(6)
WHERE name = ? AND token = '{READERS}' AND holder = ? AND expires_at > UTC_TIMESTAMP(6)"
            ),
            release_upgraded: format!(
                "DELETE l, s FROM {t} l
LEFT JOIN {t} s ON s.name = CONCAT(?, x'01', ?) AND s.token = l.token
WHERE l.name = ? AND l.token = ? AND l.expires_at > UTC_TIMESTAMP(6)"
            ),
            release_upgraded_expired: format!(
                "DELETE FROM {t} WHERE name IN (?, CONCAT(?, x'01', ?)) AND token = ?"
            ),
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

/// The statement that locks lock row `name` (an SQL expression: `?`, or a procedure's
/// parameter), made expired and held by readers if missing.
fn lock_row(t: &str, name: &str) -> String {
    format!(
        "INSERT INTO {t} (name, token, expires_at, holder, acquired_at)
VALUES ({name}, '{READERS}', UTC_TIMESTAMP(6) - INTERVAL 1 SECOND, '{READERS}', UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE name = name"
    )
}

/// The statement that counts a fencing token for lock `name` (an SQL expression), through
/// `LAST_INSERT_ID(expr)`.
fn fence(f: &str, name: &str) -> String {
    format!(
        "INSERT INTO {f} (name, fence) VALUES ({name}, LAST_INSERT_ID(1))
ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1)"
    )
}

/// `MyStatements::share_alone`: the first share of a free name, as one plain `INSERT` of its
/// two rows — the lock row (its `holder` the share's token: "this share alone") and the share.
/// Any lock row (live, expired, a writer's, a semaphore's of another limit) makes it fail with
/// a duplicate key, changing nothing, and the full acquisition decides. Every full-path join
/// (`take_share` by another token) and a writer's mark (`not_alone`) set the lock row's holder
/// back to the row token, so `leave_alone` matches only while the share is still alone and no
/// writer waits for it; a renewal by the share itself keeps it.
///
/// A writer's mark left without a lock row (another writer took the row the readers left and
/// has released it since) does not keep a lone share out; the second reader, which finds the
/// lock row, takes the full path and waits behind the mark, and the mark made again on the
/// writer's next try sends the lone share's release to the full path too.
fn share_alone(t: &str) -> String {
    format!(
        "INSERT INTO {t} (name, token, expires_at, holder, acquired_at)
VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, UTC_TIMESTAMP(6)),
       (CONCAT(?, x'01', ?), ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, UTC_TIMESTAMP(6))"
    )
}

/// `MyStatements::take_share`, its values SQL expressions (`?`, or a procedure's
/// parameters): `[name, token, lease µs, holder, row token]`. Two rows, told apart by the
/// token they are given: the lock row's is the row token, a share's its holder's own. The lock
/// row's `holder` becomes the row token too, unless it names this share alone (see
/// [`share_alone`]): a lone share's renewal keeps it alone.
fn take_share(t: &str, [name, token, lease, holder, row]: [&str; 5]) -> String {
    format!(
        "INSERT INTO {t} (name, token, expires_at, holder, acquired_at)
VALUES (CONCAT({name}, x'01', {token}), {token},
        UTC_TIMESTAMP(6) + INTERVAL {lease} MICROSECOND, {holder}, UTC_TIMESTAMP(6)),
       ({name}, {row}, UTC_TIMESTAMP(6) + INTERVAL {lease} MICROSECOND, {row}, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
    acquired_at = IF(VALUES(token) = {row}
                     AND NOT (token = VALUES(token) AND expires_at > UTC_TIMESTAMP(6)),
                     VALUES(acquired_at), acquired_at),
    expires_at = IF(VALUES(token) = {row} AND token = VALUES(token)
                    AND expires_at > UTC_TIMESTAMP(6),
                    GREATEST(expires_at, VALUES(expires_at)), VALUES(expires_at)),
    holder = IF(VALUES(token) = {row} AND NOT (token = {row} AND holder = {token}),
                VALUES(holder), holder),
    token = VALUES(token)"
    )
}

/// The procedures `take`, `give` and `upgrade` (quoted names) over lock table `t` and fence
/// table `f`: a share's acquisition and release, each the transaction the statements make (see
/// `MysqlBackend::acquire_share` and `MysqlBackend::release_shared`), run by one `CALL` — a
/// read lock's or permit's pair costs two round trips, as a plain lock's does — and an
/// upgradable share's upgrade ([`upgrade_procedure`]).
fn procedures(t: &str, f: &str, [take, give, upgrade]: [&str; 3]) -> [String; 3] {
    let lock_row = lock_row(t, "p_name");
    let take_share = take_share(t, ["p_name", "p_token", "p_lease", "p_holder", "p_row"]);
    let fence = fence(f, "p_name");
    let shares = "name > CONCAT(p_name, x'01') AND name < CONCAT(p_name, x'02')";
    let mine = "name = CONCAT(p_name, x'01', p_token)";
    let live = "expires_at > UTC_TIMESTAMP(6)";
    let ascii = "VARCHAR(255) CHARACTER SET ascii";
    let into = |shares: Shares, locking: &str, vars: &str| {
        share_state(t, shares, ["p_name", "p_token"], locking).replacen(
            "\nFROM ",
            &format!("\n    INTO {vars}\nFROM "),
            1,
        )
    };
    let state = "v_held, v_live, v_left, v_mine, v_n, v_first";
    let (permits, marks) = (
        into(Shares::Permits, "", state),
        into(Shares::Marks, "", state),
    );
    let locked = into(
        Shares::Others,
        " FOR UPDATE",
        "v_held, v_live, v_mine, v_others, v_last, v_marks",
    );
    [
        format!(
            "CREATE PROCEDURE IF NOT EXISTS {take}(IN p_name VARBINARY(2048), IN p_token {ascii},
    IN p_row {ascii}, IN p_lease BIGINT, IN p_holder VARCHAR(255), IN p_permits BOOLEAN,
    IN p_full BIGINT, IN p_fence TINYINT)
MODIFIES SQL DATA
BEGIN
    DECLARE v_held {ascii};
    DECLARE v_live, v_mine BOOLEAN;
    DECLARE v_left, v_n, v_first, v_fence BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    START TRANSACTION;
    {lock_row};
    IF p_permits THEN
        {permits};
    ELSE
        {marks};
    END IF;
    IF v_live AND v_held <> p_row THEN
        ROLLBACK;
        SELECT 2, v_held, v_live, v_left, v_first, NULL;
    ELSEIF NOT v_mine AND IF(p_permits, v_live, v_held = p_row) AND v_n >= p_full THEN
        ROLLBACK;
        SELECT 1, v_held, v_live, v_left, v_first, NULL;
    ELSE
        {take_share};
        IF p_fence = 1 THEN
            SET v_fence = COALESCE((SELECT fence FROM {f} WHERE name = p_name), 0);
        ELSEIF p_fence = 2 THEN
            {fence};
            SET v_fence = LAST_INSERT_ID();
        END IF;
        COMMIT;
        SELECT 0, v_held, v_live, v_left, v_first, v_fence;
    END IF;
END"
        ),
        format!(
            "CREATE PROCEDURE IF NOT EXISTS {give}(IN p_name VARBINARY(2048), IN p_token {ascii},
    IN p_row {ascii})
MODIFIES SQL DATA
BEGIN
    DECLARE v_held {ascii};
    DECLARE v_live, v_mine BOOLEAN;
    DECLARE v_others, v_last, v_marks BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    START TRANSACTION;
    {locked};
    IF v_held <=> p_row AND v_others = 0 AND v_marks = 0 THEN
        DELETE FROM {t} WHERE (name = p_name AND token = p_row)
            OR ({shares} AND ({mine} OR NOT ({live})));
    ELSE
        DELETE FROM {t} WHERE {shares} AND ({mine} OR NOT ({live}));
        IF v_held <=> p_row THEN
            UPDATE {t} SET expires_at = UTC_TIMESTAMP(6)
                + INTERVAL IF(v_others > 0, v_last, -1) MICROSECOND
                WHERE name = p_name AND token = p_row;
        END IF;
    END IF;
    COMMIT;
    SELECT v_mine, NOT (v_held <=> p_row AND v_others = 0);
END"
        ),
        upgrade_procedure(t, f, upgrade),
    ]
}

/// `MyStatements::mark`, its values SQL expressions (`?`, or a procedure's parameters):
/// `[name, token, lapse µs, holder]` (each `?` stands where its value goes, twice for `name`
/// and `token`). Made only while readers hold the lock row.
fn mark(t: &str, [name, token, lapse, holder]: [&str; 4]) -> String {
    format!(
        "INSERT INTO {t} (name, token, expires_at, holder, acquired_at)
SELECT CONCAT({name}, x'02', {token}), {token},
       UTC_TIMESTAMP(6) + INTERVAL {lapse} MICROSECOND, {holder}, UTC_TIMESTAMP(6)
FROM {t} m WHERE m.name = {name} AND m.token = '{READERS}'
ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)"
    )
}

/// `MyStatements::upgrade_row`, its values SQL expressions: `[token, holder, lease µs, name]`.
fn upgrade_row(t: &str, [token, holder, lease, name]: [&str; 4]) -> String {
    format!(
        "UPDATE {t} SET token = {token}, holder = {holder},
    expires_at = UTC_TIMESTAMP(6) + INTERVAL {lease} MICROSECOND, acquired_at = UTC_TIMESTAMP(6)
WHERE name = {name}"
    )
}

/// The procedure `name` (quoted) that upgrades an upgradable share in one `CALL`: the
/// transaction `MysqlBackend::upgrade_by_statements` makes, in fewer statements. It locks the
/// lock row with its shares and marks (the locking read a share's release starts with: a live
/// share means the lock row exists, so nothing needs making). Once the share is alone, one
/// `DELETE` takes the share, the upgrade's mark and the expired shares and marks, and the
/// lock row becomes the writer's (with a new fencing token if asked); else the lock is marked
/// as a waiting writer marks it.
fn upgrade_procedure(t: &str, f: &str, name: &str) -> String {
    let ascii = "VARCHAR(255) CHARACTER SET ascii";
    let locked = share_state(t, Shares::Others, ["p_name", "p_token"], " FOR UPDATE").replacen(
        "\nFROM ",
        "\n    INTO v_held, v_live, v_mine, v_others, v_last, v_marks\nFROM ",
        1,
    );
    let mark = mark(t, ["p_name", "p_token", "p_mark", "p_holder"]);
    let upgrade_row = upgrade_row(t, ["p_token", "p_holder", "p_lease", "p_name"]);
    let fence = fence(f, "p_name");
    format!(
        "CREATE PROCEDURE IF NOT EXISTS {name}(IN p_name VARBINARY(2048), IN p_token {ascii},
    IN p_holder VARCHAR(255), IN p_lease BIGINT, IN p_mark BIGINT, IN p_fencing BOOLEAN)
MODIFIES SQL DATA
BEGIN
    DECLARE v_held {ascii};
    DECLARE v_live, v_mine BOOLEAN;
    DECLARE v_others, v_last, v_marks, v_fence BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    START TRANSACTION;
    {locked};
    IF v_live AND v_held <=> p_token THEN
        SET v_fence = (SELECT fence FROM {f} WHERE name = p_name);
        ROLLBACK;
        SELECT 0, COALESCE(v_fence, 0), NULL;
    ELSEIF NOT (v_live AND v_mine AND v_held <=> '{READERS}') THEN
        ROLLBACK;
        SELECT 2, NULL, NULL;
    ELSEIF v_others > 0 THEN
        {mark};
        COMMIT;
        SELECT 1, NULL, v_last;
    ELSE
        DELETE FROM {t} WHERE name > CONCAT(p_name, x'01') AND name < CONCAT(p_name, x'03')
            AND (name = CONCAT(p_name, x'01', p_token) OR name = CONCAT(p_name, x'02', p_token)
                 OR expires_at <= UTC_TIMESTAMP(6));
        {upgrade_row};
        IF p_fencing THEN
            {fence};
            SET v_fence = LAST_INSERT_ID();
        END IF;
        COMMIT;
        SELECT 0, v_fence, NULL;
    END IF;
END"
    )
}

/// Which of a lock's rows [`share_state`] counts besides this share: the waiting writers'
/// marks (a reader's acquisition), the live permits (a permit's), or the other shares and the
/// marks (a share's renewal and release).
#[derive(Clone, Copy)]
enum Shares {
    Marks,
    Permits,
    Others,
}

/// The read of a lock row and the rows of its shares and marks, as one range scan from the
/// lock row `name` up to `name + 0x03` (`name` and `token` SQL expressions; `locking` a
/// locking clause or nothing). A scan of a few rows costs what a point read does; each extra
/// statement or subquery costs more (a scalar subquery in MariaDB about as much as a
/// statement of its own).
///
/// Read locks keep the table's layout. The lock row `name` of a key held by readers has the
/// token `readers` and lives until the longest share ends, so a writer's plain acquisition
/// finds it busy; each reader's share is a row `name + 0x01 + token` with its own lease, and
/// each writer waiting for the readers to leave marks the lock with a row
/// `name + 0x02 + token` (new readers stay out while one lives). Every reader operation runs
/// in a transaction that first locks the lock row, so they are serialised per key, and reads
/// the other rows only once it holds it, or with it (a locking read); a writer's mark is made
/// by a statement that reads the lock row locked, so it waits for such a transaction too.
///
/// `Marks` and `Permits`: (token, live, remaining µs, this share live, the live marks or
/// shares, µs until the first mark ends or the last share). `Others`: (token, live, this share
/// live, the other live shares, µs until the last of them ends, the live marks).
fn share_state(t: &str, shares: Shares, [name, token]: [&str; 2], locking: &str) -> String {
    let live = "expires_at > UTC_TIMESTAMP(6)";
    let left = "TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)";
    let row = format!("name = {name}");
    let mine = format!("name = CONCAT({name}, x'01', {token})");
    let share = format!("name > CONCAT({name}, x'01') AND name < CONCAT({name}, x'02')");
    let mark = format!("name > CONCAT({name}, x'02')");
    let count = |what: &str| format!("CAST(COALESCE(SUM({what} AND {live}), 0) AS SIGNED)");
    let until = |extreme: &str, what: &str| {
        format!("CAST({extreme}(IF({what} AND {live}, {left}, NULL)) AS SIGNED)")
    };
    let columns = match shares {
        Shares::Marks | Shares::Permits => {
            let (what, extreme) = match shares {
                Shares::Marks => (mark.clone(), "MIN"),
                _ => (share.clone(), "MAX"),
            };
            format!(
                "MAX(IF({row}, token, NULL)), MAX(IF({row}, {live}, NULL)),
       CAST(MAX(IF({row}, {left}, NULL)) AS SIGNED), {}, {}, {}",
                count(&mine),
                count(&what),
                until(extreme, &what)
            )
        }
        Shares::Others => {
            let other = format!("{share} AND NOT ({mine})");
            format!(
                "MAX(IF({row}, token, NULL)), MAX(IF({row}, {live}, NULL)), {}, {}, {}, {}",
                count(&mine),
                count(&other),
                until("MAX", &other),
                count(&mark)
            )
        }
    };
    format!(
        "SELECT {columns}
FROM {t} WHERE name >= {name} AND name < CONCAT({name}, x'03'){locking}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The upgrade's procedure runs the client's statements on its parameters: the mark and
    /// the lock row's update, with nothing left for the client to fill in.
    #[test]
    fn the_upgrade_procedure_runs_the_statements_on_its_parameters() {
        assert_eq!(
            upgrade_row("t", ["p_token", "p_holder", "p_lease", "p_name"]),
            upgrade_row("t", ["?"; 4])
                .replacen('?', "p_token", 1)
                .replacen('?', "p_holder", 1)
                .replacen('?', "p_lease", 1)
                .replacen('?', "p_name", 1)
        );
        let (settings, _) = SqlSettings::from_url(
            "mysql://h/db?table=locks",
            &crate::backend::sql::SqlOptions::default(),
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(1),
        )
        .unwrap();
        let upgrade = &MyStatements::new(&settings).procedures[2];
        assert!(upgrade.starts_with("CREATE PROCEDURE IF NOT EXISTS `locks_supg1`"));
        assert!(!upgrade.contains('?'), "{upgrade}");
        assert!(!upgrade.contains(":name"), "{upgrade}");
        assert!(
            upgrade.contains("SELECT CONCAT(p_name, x'02', p_token), p_token"),
            "the mark on the procedure's parameters: {upgrade}"
        );
    }
}
