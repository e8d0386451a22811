//! The SQL the PostgreSQL backend runs, with the table names filled in. Every time comes from
//! the database's clock (`now()`, the statement's transaction start), never the client's.

use crate::backend::sql::shares::{PERMITS, READERS};
use crate::backend::sql::{SqlSettings, quoted};

/// What ends a writer's `holder` while someone waits for its row (`E'\n?'`): set by a waiter
/// once it found the row busy and listens for its release (writers in `mark`, readers in
/// `flag`), cleared by the next owner's acquisition. A writer's release wakes the waiters
/// (`NOTIFY`) only if it is there: a `NOTIFY` serializes the commits of every notifying
/// transaction of the cluster, and cost an uncontended release most of its throughput (the
/// benchmark's row 7: 0.90× → 0.65× the raw pair with it).
const WAITED: &str = "E'\\n?'";

/// Flags lock `$1`'s row as waited for (see [`WAITED`]) if a writer holds it (not readers, not
/// a semaphore's permits) → the holder's remaining ms as `ms`; no row otherwise. The update, not
/// the statement's snapshot, decides. Run alone (`PgStatements::flag`) and inside `PgStatements::mark`.
fn flag_writers_row(t: &str) -> String {
    format!(
        "UPDATE {t} AS l
    SET holder = CASE WHEN right(l.holder, 2) = {WAITED} THEN l.holder ELSE l.holder || {WAITED} END
    WHERE l.name = $1 AND l.expires_at > now()
      AND {writers_row}
    RETURNING (extract(epoch FROM l.expires_at - now()) * 1000)::int8 AS ms",
        writers_row = writers_row()
    )
}

/// Whether `l` is a writer's row (not readers', not a semaphore's).
fn writers_row() -> String {
    format!("l.token <> '{READERS}' AND l.token !~ '^{PERMITS}[0-9]+$'")
}

/// The statements for one lock table.
pub(super) struct PgStatements {
    /// Both tables, created if missing (under an advisory lock: concurrent `CREATE TABLE IF
    /// NOT EXISTS` can otherwise fail on PostgreSQL's catalog).
    pub create: String,
    /// `$1` name, `$2` token, `$3` lease in ms, `$4` holder → rows written (1 if taken).
    /// Inserts, or takes over a row that expired (or is already ours: a retried attempt), in
    /// one statement. Nothing returned: the count says it (a `RETURNING` costs the server a
    /// result row per statement, visible in the benchmark's 64-task throughput, row 7).
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
    /// `$1` name, `$2` token → (released: a first row, `true` if it was ours and unexpired),
    /// and wakes the waiters; a writer that only waited takes its mark back from the readers.
    /// Our row found expired is deleted and its waiters woken too: they may be sleeping out an
    /// older, longer lease — a lock released before `min_hold` was shortened to end 250 ms
    /// after it, and the release at `min_hold` can come later than that on a busy host.
    pub release: String,
    /// [`release`](Self::release) of a writer that never marked the readers (it never waited
    /// behind them): the delete and the wake-up alone, without the second data-modifying CTE
    /// and the `UNION ALL` (their cost shows in the benchmark's 64-task throughput, row 7).
    pub release_unmarked: String,
    /// The common case of [`release_unmarked`](Self::release_unmarked): `$1` name, `$2` token →
    /// rows deleted (1 if the row was ours, unexpired, and no one flagged it as waited for).
    /// No result row, no wake-up to decide: the server's cheapest release (`DELETE … RETURNING`
    /// cost 0.82× → 0.97× of the raw pair's throughput on the same client, row 7's experiment).
    /// 0 rows: the full statement decides (expired, flagged, or not ours).
    pub release_quiet: String,
    /// A reader's attempt: `$1` name, `$2` token, `$3` lease in ms, `$4` holder (unused: the
    /// shares are the record) → (taken, the last write grant's fence, the row's remaining ms,
    /// ms until the first waiting writer's mark lapses, the live row's token). Joins the readers unless a writer
    /// holds the row or a writer's mark is live (see `sql::shares::READERS` for the layout).
    pub read_acquire: String,
    /// The common case of [`read_acquire`](Self::read_acquire) and
    /// [`permit_acquire`](Self::permit_acquire), without fencing: the first share of a free
    /// (or lapsed writer's) row. `$1` name, `$2` token, `$3` lease in ms, `$4` the row's token
    /// (`readers`, or `permits:<n>`) → rows written (1 if taken); 0 rows (other shares, a
    /// writer, marks): the full statement decides and says why. Without the full ones' passes
    /// over the row's lines and the lookups of a busy answer — whose start-up alone cost the
    /// server as much as a writer's whole acquisition — a lone share costs what a writer's
    /// lock does.
    pub share_join: String,
    /// `$1` name, `$2` token, `$3` lease in ms, `$4` the row's token (`readers`, or a
    /// semaphore's `permits:<n>`) → one row if the share was live and now ends `$3` ms from now
    /// (sooner or later than before: a release before `min_hold` shortens it); the row lives
    /// as long as its longest share.
    pub read_renew: String,
    /// A semaphore's permit: `$1` name, `$2` token, `$3` lease in ms, `$4` the row's token
    /// (`permits:<n>`), `$5` the limit `n`, `$6` fencing → (taken, a new fence, the live row's
    /// token, ms until the first permit's lease ends). Joins the permits (a share in `holder`,
    /// as a reader's) while fewer than `n` others are live, or takes a free or lapsed row.
    pub permit_acquire: String,
    /// `$1` name, `$2` token, `$3` the row's token (`readers`, or `permits:<n>`) → (share was
    /// live, waiters woken); the last live share's departure deletes the row — or, while
    /// writers wait, leaves it to them with their marks, its lease over, and wakes them; a
    /// permit's departure always wakes the waiters. A read lock's row deleted wakes nobody:
    /// only a writer waits for readers, and a waiting writer has its mark on the row (a
    /// `NOTIFY` serializes the commits of every notifying transaction: see [`WAITED`]). The row is locked and read first (`FOR UPDATE`:
    /// its latest version, even if it changed since the statement's snapshot), and the update
    /// or the delete decides on what it read — never on an older version, which would let a
    /// reader that joined meanwhile make both of them step aside.
    pub read_release: String,
    /// The common case of [`read_release`](Self::read_release): the only share of a row
    /// leaves, no writer's mark beside it. `$1` name, `$2` token, `$3` the row's token → rows
    /// deleted (1 if so). Nothing returned, nobody woken: only a writer waits for readers,
    /// and it has its mark in the row; a permit's waiter waits only while the semaphore is
    /// full, so not behind a lone permit of a semaphore of two or more (the caller's to
    /// check). 0 rows: the full statement decides.
    pub share_release_alone: String,
    /// A waiting writer found the row busy: `$1` name, `$2` token, `$3` mark ms → (remaining
    /// ms, marked, the row's token if not marked). Readers holding the row get the writer's
    /// mark, which keeps new readers out; a writer's row is flagged as waited for (see
    /// [`WAITED`]). No row: released or changed meanwhile (ask again at once) — a writer's row
    /// the flag did not reach (deleted after the statement's snapshot) is never answered from
    /// the snapshot, whose holder would never wake this waiter.
    pub mark: String,
    /// A waiting reader found a writer holding the row: `$1` name → the writer's remaining ms,
    /// its row flagged as waited for (see [`WAITED`]); no row if it is no writer's any more
    /// (ask again at once). The update, not a snapshot, decides: a row deleted meanwhile is
    /// never taken for a holder that will wake the reader.
    pub flag: String,
    /// An upgradable share's upgrade (see `PostgresBackend::upgrade`): `$1` name, `$2` token
    /// (`^…`), `$3` lease in ms, `$4` holder, `$5` fencing, `$6` mark ms → (1 upgraded — or
    /// already, a retry — 0 busy, -1 the share gone; the fence when upgraded; ms until the
    /// longest other share ends). The share alone: the readers' row becomes the writer's, with
    /// this token (flagged as waited for when writers had marked it, so its release wakes
    /// them). Other live shares: its mark keeps new readers out, as a waiting writer's does.
    /// The readers' row found expired with the share in it is deleted (nobody holds it).
    pub upgrade: String,
    /// An upgradable share's upgrade while it is the readers' row's only line (no other
    /// reader, no mark): `$1`–`$5` as [`upgrade`](Self::upgrade) → (1 upgraded, else 0; the
    /// fence; null). One `UPDATE` of the row (and the fence's upsert): the common case, run
    /// first; when it changes nothing, the full statement decides (a retry whose first try
    /// upgraded is found there too).
    pub upgrade_alone: String,
    /// An upgrade given up: `$1` name, `$2` token → its mark goes, and the readers it kept
    /// out are woken.
    pub abandon_upgrade: String,
    /// An upgradable share's release while it is alone: `$1` name, `$2` token, `$3` row token
    /// → how many rows went (1 or 0), as [`share_release_alone`](Self::share_release_alone),
    /// waking those waiting to take an upgradable share (`NOTIFY`), which leave no mark.
    pub upgradable_release_alone: String,
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
    /// Shared results' statements (`share`, see `postgres::share`).
    pub share: PgShareSql,
}

/// The statements of shared results (`share`) on `<table>_shared`.
pub(crate) struct PgShareSql {
    /// The table, created if missing (under an advisory lock, as the lock tables are).
    pub create: String,
    /// `$1` name → the live value (`bytea`), if any.
    pub get: String,
    /// `$1` name, `$2` value, `$3` share in ms → stores it (replacing what was there), and
    /// sweeps a few long-expired rows of other keys.
    pub put: String,
    /// `$1` name → whether a live value was there (deleted either way).
    pub drop: String,
}

impl PgShareSql {
    pub(crate) fn new(table: &str) -> PgShareSql {
        let v = quoted(&format!("{table}_shared"), '"');
        PgShareSql {
            create: format!(
                "BEGIN;
SELECT pg_advisory_xact_lock(hashtext('distlock create {table}_shared'));
{}
COMMIT;",
                pg_share_ddl(table)
            ),
            get: format!("SELECT value FROM {v} WHERE name = $1 AND expires_at > now()"),
            put: format!(
                "WITH swept AS (
    DELETE FROM {v} WHERE name IN (
        SELECT name FROM {v} WHERE expires_at < now() - interval '1 minute' AND name <> $1
        LIMIT 8 FOR UPDATE SKIP LOCKED)
)
INSERT INTO {v} (name, value, expires_at)
VALUES ($1, $2, now() + $3::int8 * interval '1 millisecond')
ON CONFLICT (name) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at"
            ),
            drop: format!(
                "WITH gone AS (DELETE FROM {v} WHERE name = $1 RETURNING expires_at > now() AS live)
SELECT coalesce(bool_or(live), false) FROM gone"
            ),
        }
    }
}

/// The shared results' table (`<table>_shared`), as the guide prints it
/// (`distlock::guide::share`).
pub(crate) fn pg_share_ddl(table: &str) -> String {
    let v = quoted(&format!("{table}_shared"), '"');
    // An index is named without a schema: it lives in its table's.
    let bare = table.rsplit('.').next().unwrap_or(table);
    let index = quoted(&format!("{bare}_shared_expires"), '"');
    format!(
        "CREATE TABLE IF NOT EXISTS {v} (
    name       text        PRIMARY KEY,
    value      bytea       NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS {index} ON {v} (expires_at);"
    )
}

/// The DDL, as printed in the guide (`distlock::guide::postgres`).
pub(crate) fn pg_ddl(table: &str, fence_table: &str) -> String {
    let (t, f) = (quoted(table, '"'), quoted(fence_table, '"'));
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

/// The server's clock in unix milliseconds.
const NOW_MS: &str = "(extract(epoch FROM now()) * 1000)::int8";

/// The live lines of `l.holder` (a readers' row) whose token is not in `dropped` (SQL
/// expressions): what to keep when `$2` changes its own. NULL for none.
fn live_lines_except(dropped: &str) -> String {
    format!(
        "(SELECT string_agg(line, E'\\n') FROM string_to_table(l.holder, E'\\n') AS s(line)
          WHERE split_part(line, ' ', 1) NOT IN ({dropped})
            AND nullif(split_part(line, ' ', 2), '')::int8 > {NOW_MS})"
    )
}

/// The live lines except those of token `$2` (its share and its mark).
fn kept() -> String {
    live_lines_except("$2, '!' || $2")
}

/// The live lines except `$2`'s share (its mark, an upgrade's, stays): what a renewal of
/// `$2`'s share keeps.
fn kept_but_share() -> String {
    live_lines_except("$2")
}

/// The live lines except `'!' || $2` (an upgrade's mark): what an upgrade given up leaves.
fn kept_but_mark() -> String {
    live_lines_except("'!' || $2")
}

/// The live upgradable shares (`^…`) of `l.holder` other than `$2`'s: a second one is refused.
fn other_upgradable() -> String {
    format!(
        "(SELECT count(*) FROM string_to_table(l.holder, E'\\n') AS s(line)
          WHERE left(line, 1) = '^' AND split_part(line, ' ', 1) <> $2
            AND nullif(split_part(line, ' ', 2), '')::int8 > {NOW_MS})"
    )
}

/// Over the live lines of `l.holder` that are writers' marks (`marks` true) or shares, except
/// `$2`'s: `what` of their times (`min(…)`, `max(…)`, `count(*)`…).
fn over_lines(what: &str, marks: bool) -> String {
    let kind = if marks { "=" } else { "<>" };
    format!(
        "(SELECT {what} FROM string_to_table(l.holder, E'\\n') AS s(line)
          WHERE left(line, 1) {kind} '!' AND split_part(line, ' ', 1) NOT IN ($2, '!' || $2)
            AND nullif(split_part(line, ' ', 2), '')::int8 > {NOW_MS})"
    )
}

/// The lines of `holder` (a column of `from`) for one pass of aggregates: each `line` with its
/// `tok`en, its time `at` (a share's end, a mark's lapse), whether it is a writer's `mark`, and
/// whether to `keep` it when `$2` changes its own (live, not `$2`'s) — beside `now_ms`.
/// Every figure a statement needs of a readers' row from one reading of its lines, where
/// a subquery per figure made the executor's start-up the statement's largest cost.
fn lines_of(holder: &str, from: &str) -> String {
    format!(
        "{from}, LATERAL (SELECT {NOW_MS} AS now_ms) n,
         string_to_table({holder}, E'\\n') AS x(line),
         LATERAL (SELECT split_part(line, ' ', 1) AS tok,
                         nullif(split_part(line, ' ', 2), '')::int8 AS at,
                         left(line, 1) = '!' AS mark) p,
         LATERAL (SELECT tok NOT IN ($2, '!' || $2) AND at > now_ms AS keep) k"
    )
}

impl PgStatements {
    pub(super) fn new(settings: &SqlSettings) -> PgStatements {
        let table = &settings.table;
        let t = quoted(table, '"');
        let f = quoted(&settings.fence_table(), '"');
        let columns = "l.name, l.token, l.holder, \
            (extract(epoch FROM l.acquired_at) * 1000)::int8, \
            (extract(epoch FROM l.expires_at - now()) * 1000)::int8, f.fence";
        PgStatements {
            create: format!(
                "BEGIN;
SELECT pg_advisory_xact_lock(hashtext('distlock create {table}'));
{}
COMMIT;",
                pg_ddl(table, &settings.fence_table())
            ),
            acquire: format!(
                "INSERT INTO {t} AS l (name, token, expires_at, holder, acquired_at)
VALUES ($1, $2, now() + $3::int8 * interval '1 millisecond', $4, now())
ON CONFLICT (name) DO UPDATE
    SET token = excluded.token, expires_at = excluded.expires_at,
        holder = CASE WHEN l.token = excluded.token THEN l.holder ELSE excluded.holder END,
        acquired_at = excluded.acquired_at
    WHERE l.expires_at <= now() OR l.token = excluded.token"
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
            holder = CASE WHEN l.token = excluded.token THEN l.holder ELSE excluded.holder END,
            acquired_at = excluded.acquired_at
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
    RETURNING name, expires_at > now() AS live, right(holder, 2) = {WAITED} AS waited
), unmarked AS (
    UPDATE {t} AS l SET holder = coalesce({kept}, '')
    WHERE l.name = $1 AND l.token = '{READERS}'
      AND position(E'\\n!' || $2 || ' ' IN E'\\n' || l.holder) > 0
    RETURNING l.name
)
SELECT live, CASE WHEN waited THEN pg_notify('{table}', name) END FROM gone
UNION ALL
SELECT false, pg_notify('{table}', name) FROM unmarked",
                kept = kept()
            ),
            release_unmarked: format!(
                "WITH gone AS (
    DELETE FROM {t} WHERE name = $1 AND token = $2
    RETURNING name, expires_at > now() AS live, right(holder, 2) = {WAITED} AS waited
)
SELECT live, CASE WHEN waited THEN pg_notify('{table}', name) END FROM gone"
            ),
            release_quiet: format!(
                "DELETE FROM {t} WHERE name = $1 AND token = $2 AND expires_at > now()
    AND right(holder, 2) <> {WAITED}"
            ),
            read_acquire: format!(
                "WITH taken AS (
    INSERT INTO {t} AS l (name, token, expires_at, holder, acquired_at)
    VALUES ($1, '{READERS}', now() + $3::int8 * interval '1 millisecond',
            $2 || ' ' || ({NOW_MS} + $3::int8), now())
    ON CONFLICT (name) DO UPDATE SET
        token = excluded.token,
        holder = CASE WHEN l.token = '{READERS}' AND l.expires_at > now()
                      THEN coalesce({kept} || E'\\n', '') ELSE '' END || excluded.holder,
        expires_at = CASE WHEN l.token = '{READERS}' AND l.expires_at > now()
                          THEN greatest(l.expires_at, excluded.expires_at)
                          ELSE excluded.expires_at END,
        acquired_at = CASE WHEN l.token = '{READERS}' AND l.expires_at > now()
                           THEN l.acquired_at ELSE now() END
    WHERE (l.expires_at <= now() AND (l.token <> '{READERS}' OR {marks} = 0))
       OR (l.token = '{READERS}'
           AND (position(E'\\n' || $2 || ' ' IN E'\\n' || l.holder) > 0
                OR ({marks} = 0 AND (left($2, 1) <> '^' OR {ups} = 0))))
    RETURNING l.name
)
SELECT EXISTS (SELECT 1 FROM taken),
       (SELECT fence FROM {f} WHERE name = $1),
       (SELECT (extract(epoch FROM l.expires_at - now()) * 1000)::int8 FROM {t} l
         WHERE l.name = $1),
       (SELECT {first_mark} - {NOW_MS} FROM {t} l WHERE l.name = $1 AND l.token = '{READERS}'),
       (SELECT l.token FROM {t} l WHERE l.name = $1 AND l.expires_at > now())",
                kept = kept(),
                marks = over_lines("count(*)", true),
                ups = other_upgradable(),
                first_mark = over_lines("min(nullif(split_part(line, ' ', 2), '')::int8)", true),
            ),
            share_join: format!(
                "INSERT INTO {t} AS l (name, token, expires_at, holder, acquired_at)
    VALUES ($1, $4, now() + $3::int8 * interval '1 millisecond',
            $2 || ' ' || ({NOW_MS} + $3::int8), now())
    ON CONFLICT (name) DO UPDATE SET
        token = excluded.token, holder = excluded.holder,
        expires_at = excluded.expires_at, acquired_at = excluded.acquired_at
    WHERE l.expires_at <= now() AND l.token <> '{READERS}'"
            ),
            read_renew: format!(
                "UPDATE {t} AS l SET
    holder = CASE WHEN l.token = $2 THEN l.holder
                  ELSE coalesce({kept} || E'\\n', '') || $2 || ' ' || ({NOW_MS} + $3::int8) END,
    expires_at = CASE WHEN l.token = $2 THEN now() + $3::int8 * interval '1 millisecond'
                      ELSE greatest(now() + $3::int8 * interval '1 millisecond',
                                    coalesce(to_timestamp({last} / 1000.0), now())) END
WHERE l.name = $1 AND l.expires_at > now()
  AND ((l.token = $4
        AND EXISTS (SELECT 1 FROM string_to_table(l.holder, E'\\n') AS s(line)
                    WHERE split_part(line, ' ', 1) = $2
                      AND nullif(split_part(line, ' ', 2), '')::int8 > {NOW_MS}))
       OR (l.token = $2 AND left($2, 1) = '^'))",
                kept = kept_but_share(),
                last = over_lines("max(nullif(split_part(line, ' ', 2), '')::int8)", false),
            ),
            permit_acquire: format!(
                "WITH taken AS (
    INSERT INTO {t} AS l (name, token, expires_at, holder, acquired_at)
    VALUES ($1, $4, now() + $3::int8 * interval '1 millisecond',
            $2 || ' ' || ({NOW_MS} + $3::int8), now())
    ON CONFLICT (name) DO UPDATE SET
        token = excluded.token,
        holder = CASE WHEN l.token = $4 AND l.expires_at > now()
                      THEN coalesce({kept} || E'\\n', '') ELSE '' END || excluded.holder,
        expires_at = CASE WHEN l.token = $4 AND l.expires_at > now()
                          THEN greatest(l.expires_at, excluded.expires_at)
                          ELSE excluded.expires_at END,
        acquired_at = CASE WHEN l.token = $4 AND l.expires_at > now()
                           THEN l.acquired_at ELSE now() END
    WHERE (l.expires_at <= now() AND (l.token <> '{READERS}' OR {marks} = 0))
       OR (l.token = $4
           AND (position(E'\\n' || $2 || ' ' IN E'\\n' || l.holder) > 0 OR {others} < $5))
    RETURNING l.name
), fenced AS (
    INSERT INTO {f} AS f (name, fence)
    SELECT name, 1 FROM taken WHERE $6
    ON CONFLICT (name) DO UPDATE SET fence = f.fence + 1
    RETURNING f.fence
)
SELECT EXISTS (SELECT 1 FROM taken),
       (SELECT fence FROM fenced),
       (SELECT l.token FROM {t} l WHERE l.name = $1 AND l.expires_at > now()),
       (SELECT {first} - {NOW_MS} FROM {t} l WHERE l.name = $1 AND l.token = $4)",
                kept = kept(),
                marks = over_lines("count(*)", true),
                others = over_lines("count(*)", false),
                first = over_lines("min(nullif(split_part(line, ' ', 2), '')::int8)", false),
            ),
            read_release: format!(
                "WITH cur AS (
    SELECT holder FROM {t} WHERE name = $1 AND token = $3 AND expires_at > now()
    FOR UPDATE
), s AS (
    SELECT string_agg(line, E'\\n') FILTER (WHERE keep) AS kept,
           max(at) FILTER (WHERE keep AND NOT mark) AS last,
           count(*) FILTER (WHERE keep AND NOT mark) AS others,
           count(*) FILTER (WHERE keep AND mark) AS marks,
           count(*) FILTER (WHERE keep AND mark AND left(tok, 2) = '!^') > 0 AS upgrading,
           count(*) FILTER (WHERE tok = $2 AND at > now_ms) > 0 AS mine
    FROM {lines}
), left_some AS (
    UPDATE {t} AS l SET
        holder = coalesce(s.kept, ''),
        expires_at = coalesce(to_timestamp(s.last / 1000.0), now() - interval '1 millisecond')
    FROM s
    WHERE l.name = $1 AND l.token = $3 AND s.mine AND (s.others > 0 OR s.marks > 0)
    RETURNING l.name, l.expires_at > now() AS held, s.upgrading
), left_none AS (
    DELETE FROM {t} AS l USING s
    WHERE l.name = $1 AND l.token = $3 AND s.mine AND s.others = 0 AND s.marks = 0
    RETURNING l.name
), woke AS (
    SELECT pg_notify('{table}', name) FROM left_none WHERE $3 <> '{READERS}' OR left($2, 1) = '^'
    UNION ALL
    SELECT pg_notify('{table}', name) FROM left_some
    WHERE NOT held OR $3 <> '{READERS}' OR upgrading OR left($2, 1) = '^'
)
SELECT EXISTS (SELECT 1 FROM left_some) OR EXISTS (SELECT 1 FROM left_none),
       (SELECT count(*) FROM woke)",
                lines = lines_of("cur.holder", "cur"),
            ),
            share_release_alone: format!(
                "DELETE FROM {t} WHERE name = $1 AND token = $3 AND expires_at > now()
    AND strpos(holder, E'\\n') = 0 AND split_part(holder, ' ', 1) = $2
    AND nullif(split_part(holder, ' ', 2), '')::int8 > {NOW_MS}"
            ),
            mark: format!(
                "WITH marked AS (
    UPDATE {t} AS l SET
        holder = coalesce({kept} || E'\\n', '') || '!' || $2 || ' ' || ({NOW_MS} + $3::int8)
    WHERE l.name = $1 AND l.token = '{READERS}' AND l.expires_at > now()
    RETURNING (extract(epoch FROM l.expires_at - now()) * 1000)::int8 AS ms
), flagged AS (
    {flag}
)
SELECT ms, true, NULL::text FROM marked
UNION ALL
SELECT ms, false, NULL::text FROM flagged
UNION ALL
SELECT (extract(epoch FROM l.expires_at - now()) * 1000)::int8, false, l.token FROM {t} l
WHERE l.name = $1 AND NOT EXISTS (SELECT 1 FROM marked) AND NOT EXISTS (SELECT 1 FROM flagged)
  AND NOT ({writers_row} AND l.expires_at > now())",
                kept = kept(),
                flag = flag_writers_row(&t),
                writers_row = writers_row(),
            ),
            flag: flag_writers_row(&t),
            upgrade: format!(
                "WITH cur AS (
    SELECT holder FROM {t} WHERE name = $1 AND token = '{READERS}' AND expires_at > now()
    FOR UPDATE
), s AS (
    SELECT count(*) FILTER (WHERE keep AND NOT mark) AS others,
           max(at - now_ms) FILTER (WHERE keep AND NOT mark) AS others_ms,
           count(*) FILTER (WHERE keep AND mark) AS marks,
           count(*) FILTER (WHERE tok = $2 AND at > now_ms) > 0 AS mine,
           string_agg(line, E'\\n') FILTER (WHERE at > now_ms AND tok <> '!' || $2) AS rest
    FROM {lines}
), upgraded AS (
    UPDATE {t} AS l SET token = $2,
        holder = $4 || CASE WHEN s.marks > 0 THEN {WAITED} ELSE '' END,
        expires_at = now() + $3::int8 * interval '1 millisecond', acquired_at = now()
    FROM s
    WHERE l.name = $1 AND l.token = '{READERS}' AND s.mine AND s.others = 0
    RETURNING l.name
), fenced AS (
    INSERT INTO {f} AS f (name, fence)
    SELECT name, 1 FROM upgraded WHERE $5
    ON CONFLICT (name) DO UPDATE SET fence = f.fence + 1
    RETURNING f.fence
), marked AS (
    UPDATE {t} AS l SET holder = s.rest || E'\\n!' || $2 || ' ' || ({NOW_MS} + $6::int8)
    FROM s
    WHERE l.name = $1 AND l.token = '{READERS}' AND s.mine AND s.others > 0
    RETURNING l.name
), stale AS (
    DELETE FROM {t} AS l
    WHERE l.name = $1 AND l.token = '{READERS}' AND l.expires_at <= now()
      AND position(E'\\n' || $2 || ' ' IN E'\\n' || l.holder) > 0
), again AS (
    SELECT f.fence FROM {t} l LEFT JOIN {f} f ON f.name = l.name
    WHERE l.name = $1 AND l.token = $2 AND l.expires_at > now()
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM upgraded) OR EXISTS (SELECT 1 FROM again) THEN 1
            WHEN EXISTS (SELECT 1 FROM marked) THEN 0 ELSE -1 END,
       coalesce((SELECT fence FROM fenced), (SELECT fence FROM again)),
       (SELECT others_ms FROM s)",
                lines = lines_of("cur.holder", "cur"),
            ),
            upgrade_alone: format!(
                "WITH up AS (
    UPDATE {t} SET token = $2, holder = $4,
        expires_at = now() + $3::int8 * interval '1 millisecond', acquired_at = now()
    WHERE name = $1 AND token = '{READERS}' AND expires_at > now()
        AND strpos(holder, E'\\n') = 0 AND split_part(holder, ' ', 1) = $2
        AND nullif(split_part(holder, ' ', 2), '')::int8 > {NOW_MS}
    RETURNING name
), fenced AS (
    INSERT INTO {f} AS f (name, fence)
    SELECT name, 1 FROM up WHERE $5
    ON CONFLICT (name) DO UPDATE SET fence = f.fence + 1
    RETURNING f.fence
)
SELECT (SELECT count(*) FROM up)::int4, (SELECT fence FROM fenced), NULL::int8"
            ),
            upgradable_release_alone: format!(
                "WITH gone AS (
    DELETE FROM {t} WHERE name = $1 AND token = $3 AND expires_at > now()
        AND strpos(holder, E'\\n') = 0 AND split_part(holder, ' ', 1) = $2
        AND nullif(split_part(holder, ' ', 2), '')::int8 > {NOW_MS}
    RETURNING name
)
SELECT count(pg_notify('{table}', name)) FROM gone"
            ),
            abandon_upgrade: format!(
                "WITH unmarked AS (
    UPDATE {t} AS l SET holder = coalesce({kept}, '')
    WHERE l.name = $1 AND l.token = '{READERS}'
      AND position(E'\\n!' || $2 || ' ' IN E'\\n' || l.holder) > 0
    RETURNING l.name
)
SELECT pg_notify('{table}', name) FROM unmarked",
                kept = kept_but_mark(),
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
            share: PgShareSql::new(table),
        }
    }
}
