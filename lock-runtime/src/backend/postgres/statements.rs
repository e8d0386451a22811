//! The SQL the PostgreSQL backend runs, with the table names filled in. Every time comes from
//! the database's clock (`now()`, the statement's transaction start), never the client's.

use crate::backend::sql::SqlSettings;

/// The statements for one lock table.
pub(super) struct Sql {
    /// Both tables, created if missing (under an advisory lock: concurrent `CREATE TABLE IF
    /// NOT EXISTS` can otherwise fail on PostgreSQL's catalog).
    pub create: String,
    /// `$1` name, `$2` token, `$3` lease in ms, `$4` holder → one row if taken. Inserts, or
    /// takes over a row that expired (or is already ours: a retried attempt), in one statement.
    pub acquire: String,
    /// The same with fencing: `$1`–`$4` as above → (taken, fence, holder's remaining ms); raises
    /// the fencing counter, in the same statement, only when taken.
    pub acquire_fenced: String,
    /// `$1` name → the holder's remaining lease in ms (after an unfenced attempt found it busy).
    pub remaining: String,
    /// `$1` name, `$2` token, `$3` lease in ms → rows updated (1 if still ours).
    pub renew: String,
    /// `$1` names, `$2` tokens, `$3` leases in ms → the names still ours, renewed.
    pub renew_many: String,
    /// `$1` name, `$2` token → one row if it was ours and unexpired; wakes the waiters.
    pub release: String,
    /// Subscribes a connection to the table's release notifications.
    pub listen: String,
    /// Admin: `$1` name → the live row: (name, token, holder, acquired ms, remaining ms,
    /// fence).
    pub inspect: String,
    /// Admin: `$1` LIKE pattern, `$2` limit → live rows as in `inspect`, by name.
    pub list: String,
    /// Admin: `$1` name → deletes the row whoever holds it, wakes the waiters; the row as in
    /// `inspect` if it was live.
    pub force_release: String,
}

/// `"schema"."table"` or `"table"` (names are checked to be letters, digits and `_`).
fn quoted(table: &str) -> String {
    table
        .split('.')
        .map(|part| format!("\"{part}\""))
        .collect::<Vec<_>>()
        .join(".")
}

/// The DDL, as printed in the README.
pub(crate) fn ddl(table: &str, fence_table: &str) -> String {
    let (t, f) = (quoted(table), quoted(fence_table));
    format!(
        "CREATE TABLE IF NOT EXISTS {t} (
    name        text        PRIMARY KEY,
    token       text        NOT NULL,
    expires_at  timestamptz NOT NULL,
    holder      text        NOT NULL,
    acquired_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS {f} (
    name  text   PRIMARY KEY,
    fence bigint NOT NULL
);"
    )
}

impl Sql {
    pub(super) fn new(settings: &SqlSettings) -> Sql {
        let table = &settings.table;
        let t = quoted(table);
        let f = quoted(&settings.fence_table());
        let columns = "l.name, l.token, l.holder, \
            (extract(epoch FROM l.acquired_at) * 1000)::int8, \
            (extract(epoch FROM l.expires_at - now()) * 1000)::int8, f.fence";
        Sql {
            create: format!(
                "BEGIN;
SELECT pg_advisory_xact_lock(hashtext('distlock create {table}'));
{}
COMMIT;",
                ddl(table, &settings.fence_table())
            ),
            acquire: format!(
                "INSERT INTO {t} AS l (name, token, expires_at, holder, acquired_at)
VALUES ($1, $2, now() + $3::int8 * interval '1 millisecond', $4, now())
ON CONFLICT (name) DO UPDATE
    SET token = excluded.token, expires_at = excluded.expires_at,
        holder = excluded.holder, acquired_at = excluded.acquired_at
    WHERE l.expires_at <= now() OR l.token = excluded.token
RETURNING true"
            ),
            remaining: format!(
                "SELECT (extract(epoch FROM expires_at - now()) * 1000)::int8 FROM {t} \
                 WHERE name = $1"
            ),
            acquire_fenced: format!(
                "WITH taken AS (
    INSERT INTO {t} AS l (name, token, expires_at, holder, acquired_at)
    VALUES ($1, $2, now() + $3::int8 * interval '1 millisecond', $4, now())
    ON CONFLICT (name) DO UPDATE
        SET token = excluded.token, expires_at = excluded.expires_at,
            holder = excluded.holder, acquired_at = excluded.acquired_at
        WHERE l.expires_at <= now() OR l.token = excluded.token
    RETURNING l.name
), fenced AS (
    INSERT INTO {f} AS f (name, fence)
    SELECT name, 1 FROM taken
    ON CONFLICT (name) DO UPDATE SET fence = f.fence + 1
    RETURNING f.fence
)
SELECT EXISTS (SELECT 1 FROM taken),
       (SELECT fence FROM fenced),
       (SELECT (extract(epoch FROM h.expires_at - now()) * 1000)::int8
          FROM {t} h WHERE h.name = $1)"
            ),
            renew: format!(
                "UPDATE {t} SET expires_at = now() + $3::int8 * interval '1 millisecond'
WHERE name = $1 AND token = $2 AND expires_at > now()"
            ),
            renew_many: format!(
                "UPDATE {t} AS l SET expires_at = now() + v.ms * interval '1 millisecond'
FROM unnest($1::text[], $2::text[], $3::int8[]) AS v(name, token, ms)
WHERE l.name = v.name AND l.token = v.token AND l.expires_at > now()
RETURNING l.name"
            ),
            release: format!(
                "WITH gone AS (
    DELETE FROM {t} WHERE name = $1 AND token = $2
    RETURNING name, expires_at > now() AS live
)
SELECT pg_notify('{table}', name) FROM gone WHERE live"
            ),
            listen: format!("LISTEN \"{table}\""),
            inspect: format!(
                "SELECT {columns} FROM {t} l LEFT JOIN {f} f ON f.name = l.name
WHERE l.name = $1 AND l.expires_at > now()"
            ),
            list: format!(
                "SELECT {columns} FROM {t} l LEFT JOIN {f} f ON f.name = l.name
WHERE l.name LIKE $1 AND l.expires_at > now() ORDER BY l.name LIMIT $2"
            ),
            force_release: format!(
                "WITH l AS (DELETE FROM {t} WHERE name = $1 RETURNING *)
SELECT {columns}, pg_notify('{table}', l.name) FROM l LEFT JOIN {f} f ON f.name = l.name
WHERE l.expires_at > now()"
            ),
        }
    }
}
