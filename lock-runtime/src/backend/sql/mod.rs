//! What the SQL backends share: the lock table's name and options, who holds a lock, and the
//! parameters distlock reads from a database URL; readers' shares and permits in a lock row
//! (`shares`), and failed statements, their retries and what they say (`errors`).
//!
//! The table (PostgreSQL and MySQL alike, types differ): one row per held lock, the lock name
//! as its primary key — the unique key that makes a second `INSERT` of the same name fail —
//! the owner token, the expiry computed by the database's clock, and who holds it (host, pid,
//! since when). Fencing counters live in a second table, `<table>_fences`, one row per lock
//! name ever acquired with fencing, so they keep rising across releases.

// Without a SQL backend compiled in, only the builder's options are used.
#![cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]

use std::time::Duration;

use crate::error::LockError;

#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod errors;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod shares;

/// Where one acquisition's connection stands, in the backends that hold each lock on a
/// connection of its own (PostgreSQL `mode=advisory`, MySQL `mode=named`).
#[cfg(any(feature = "postgres", feature = "mysql"))]
#[derive(Debug, Clone)]
pub(crate) enum SessionState {
    /// Holds nothing and waits for nothing: may go back to the idle connections.
    Idle,
    /// Like `Idle`, after a try that found the lock held by another (on PostgreSQL: the
    /// server passed the restart guard, so the waiter may wait inside it).
    Contended,
    /// A statement is under way (or was dropped under way): what it did is unknown, so the
    /// connection is closed, never reused, when the acquisition ends.
    InFlight,
    /// The blocking request waits in the server.
    Waiting,
    /// The server granted the lock to the blocking request (with this fencing token); the
    /// grant is dated by the next attempt.
    Granted(Option<u64>),
    /// The blocking request failed.
    Failed(String),
    /// Held.
    Held(Option<u64>),
}

/// The lock table unless the builder or the URL names another.
pub(crate) const DEFAULT_TABLE: &str = "distlock_locks";

/// Connections per client unless the builder or the URL says otherwise. Statements are
/// pipelined on each connection, so a few serve many tasks.
pub(crate) const DEFAULT_POOL_SIZE: usize = 4;

/// The most connections one client may open.
pub(crate) const MAX_POOL_SIZE: usize = 64;

/// The longest table name accepted: PostgreSQL cuts identifiers at 63 bytes and MySQL at 64,
/// and the fencing table adds `_fences`.
const MAX_TABLE_LEN: usize = 56;

/// Settings of a SQL backend, from the builder and the URL.
#[derive(Clone, Debug)]
pub(crate) struct SqlSettings {
    /// The lock table: `name` or `schema.name`.
    pub table: String,
    /// Create the tables on connect if they are missing (off when migrations own the schema).
    pub create_table: bool,
    pub pool_size: usize,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    /// `mode=advisory`: locks are the server's advisory locks (PostgreSQL), each held on a
    /// connection of its own, instead of rows of the lock table; with the longest lease any
    /// client of the server may ask for (`max_lease_ms`, default [`DEFAULT_MAX_LEASE`]).
    pub advisory: Option<Duration>,
    /// `mode=named` (MySQL, MariaDB): locks are the server's named locks (`GET_LOCK`), each
    /// held on a connection of its own, instead of rows of the lock table.
    pub named: bool,
    /// TLS trust and identity given in code (the URL's own TLS parameters stay in the driver
    /// URL: each database names them its way).
    pub tls: Option<crate::tls::TlsConfig>,
    /// `pooler=transaction` (PostgreSQL): the URL reaches the server through a pooler in
    /// transaction mode (PgBouncer, RDS Proxy, Supavisor …), so no statement relies on the
    /// server connection outliving its transaction.
    pub transaction_pooler: bool,
    /// `listen_url=` (PostgreSQL): a direct connection to the server for `LISTEN`, where the
    /// URL goes through a transaction pooler (which cannot carry it).
    pub listen_url: Option<String>,
}

/// The longest lease of the advisory-lock mode unless the URL says otherwise (`max_lease_ms`):
/// after a server restart no lock is granted until the server has been up this long.
pub(crate) const DEFAULT_MAX_LEASE: Duration = Duration::from_secs(60);

/// The builder's SQL options; `None` leaves the URL's value or the default.
#[derive(Clone, Debug, Default)]
pub(crate) struct SqlOptions {
    pub table: Option<String>,
    pub create_table: Option<bool>,
    pub pool_size: Option<usize>,
    /// [`LockClientBuilder::tls`](crate::LockClientBuilder::tls).
    pub tls: Option<crate::tls::TlsConfig>,
}

impl SqlSettings {
    /// Takes distlock's own parameters (`table`, `create_table`, `pool_size`) out of `url`'s
    /// query string — the driver would refuse them — and combines them with the builder's
    /// options (the builder wins). Returns the settings and the URL for the driver.
    pub(crate) fn from_url(
        url: &str,
        options: &SqlOptions,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<(SqlSettings, String), LockError> {
        let shown = crate::url::redact_url(url);
        let (base, query) = match url.split_once('?') {
            Some((base, query)) => (base, query),
            None => (url, ""),
        };
        let mut kept = Vec::new();
        let (mut table, mut create_table, mut pool_size) = (None, None, None);
        let (mut advisory, mut max_lease, mut named) = (false, None, false);
        let (mut transaction_pooler, mut listen_url) = (false, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "table" => table = Some(value.to_owned()),
                "create_table" => {
                    create_table = Some(match value {
                        "true" | "1" | "yes" => true,
                        "false" | "0" | "no" => false,
                        _ => {
                            return Err(LockError::Config(format!(
                                "`create_table={value}` in {shown}: expected `true` or `false`"
                            )));
                        }
                    })
                }
                "pool_size" => {
                    pool_size = Some(value.parse::<usize>().map_err(|_| {
                        LockError::Config(format!(
                            "`pool_size={value}` in {shown}: expected a number of connections \
                             (1 to {MAX_POOL_SIZE})"
                        ))
                    })?)
                }
                "mode" => {
                    (advisory, named) = match value {
                        "advisory" => (true, false),
                        "named" => (false, true),
                        "table" => (false, false),
                        _ => {
                            return Err(LockError::Config(format!(
                                "`mode={value}` in {shown}: expected `table` (locks are rows of \
                                 the lock table, the default), `advisory` (the server's \
                                 advisory locks, PostgreSQL) or `named` (the server's named \
                                 locks, MySQL and MariaDB)"
                            )));
                        }
                    }
                }
                "max_lease_ms" => {
                    max_lease = Some(
                        value
                            .parse::<u64>()
                            .ok()
                            .filter(|ms| (1..=604_800_000).contains(ms))
                            .map(Duration::from_millis)
                            .ok_or_else(|| {
                                LockError::Config(format!(
                                    "`max_lease_ms={value}` in {shown}: expected the longest \
                                     lease in milliseconds (1 to 604800000, the longest lease: 7 days)"
                                ))
                            })?,
                    )
                }
                "pooler" => {
                    transaction_pooler = match value {
                        "transaction" => true,
                        "none" | "session" => false,
                        _ => {
                            return Err(LockError::Config(format!(
                                "`pooler={value}` in {shown}: expected `transaction` (the URL \
                                 goes through a pooler in transaction mode: PgBouncer's \
                                 `pool_mode = transaction`, RDS Proxy, Supavisor), `session` or \
                                 `none` (the default: a direct connection, or a pool in session \
                                 mode)"
                            )));
                        }
                    }
                }
                "listen_url" => {
                    let decoded = crate::url::percent_decode(value);
                    if !(decoded.starts_with("postgres://")
                        || decoded.starts_with("postgresql://"))
                    {
                        return Err(LockError::Config(format!(
                            "`listen_url` in {shown}: expected a `postgres://` URL of the \
                             server itself (not the pooler), its own `?` and `&` written as \
                             `%3F` and `%26`"
                        )));
                    }
                    listen_url = Some(decoded);
                }
                _ => kept.push(pair),
            }
        }
        if listen_url.is_some() && !transaction_pooler {
            return Err(LockError::Config(format!(
                "`listen_url` in {shown} is for a URL through a transaction pooler: add \
                 `pooler=transaction`, or remove it (without a pooler, the URL's own connection \
                 listens)"
            )));
        }
        if transaction_pooler && advisory {
            return Err(LockError::Config(format!(
                "`mode=advisory` with `pooler=transaction` in {shown}: an advisory lock belongs \
                 to a server session, and a pooler in transaction mode hands that session to \
                 other clients after each statement, so the lock would belong to nobody. Use \
                 the lock table through the pooler (leave out `mode=advisory`), or give \
                 `mode=advisory` a URL of the server itself or of a pool in session mode"
            )));
        }
        if max_lease.is_some() && !advisory {
            return Err(LockError::Config(format!(
                "`max_lease_ms` in {shown} applies to `mode=advisory` only: add `mode=advisory`, \
                 or remove it"
            )));
        }
        let settings = SqlSettings {
            table: options
                .table
                .clone()
                .or(table)
                .unwrap_or_else(|| DEFAULT_TABLE.to_owned()),
            create_table: options.create_table.or(create_table).unwrap_or(true),
            pool_size: options.pool_size.or(pool_size).unwrap_or(DEFAULT_POOL_SIZE),
            connect_timeout,
            response_timeout,
            advisory: advisory.then(|| max_lease.unwrap_or(DEFAULT_MAX_LEASE)),
            named,
            tls: options.tls.clone(),
            transaction_pooler,
            listen_url,
        };
        check_table_name(&settings.table)?;
        if !(1..=MAX_POOL_SIZE).contains(&settings.pool_size) {
            return Err(LockError::Config(format!(
                "a pool of {} connections: the pool size must be 1 to {MAX_POOL_SIZE}",
                settings.pool_size
            )));
        }
        let driver_url = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        Ok((settings, driver_url))
    }

    /// The fencing table: the lock table's name with `_fences` appended.
    pub(crate) fn fence_table(&self) -> String {
        format!("{}_fences", self.table)
    }
}

/// A table name distlock can put into statements without quoting surprises: letters, digits
/// and `_`, not starting with a digit, optionally after one `schema.`.
pub(crate) fn check_table_name(table: &str) -> Result<(), LockError> {
    let valid_part = |part: &str| {
        !part.is_empty()
            && part.len() <= MAX_TABLE_LEN
            && !part.starts_with(|c: char| c.is_ascii_digit())
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let valid = match table.split_once('.') {
        Some((schema, name)) => valid_part(schema) && valid_part(name),
        None => valid_part(table),
    };
    if valid {
        Ok(())
    } else {
        Err(LockError::Config(format!(
            "invalid lock table name {table:?}: use letters, digits and `_` (not starting with a \
             digit, at most {MAX_TABLE_LEN} characters), optionally as `schema.table`"
        )))
    }
}

/// Who holds a lock, stored in its row for people looking at the table: `host pid 1234`.
pub(crate) fn holder_id() -> String {
    format!("{} pid {}", crate::token::host_name(), std::process::id())
}

/// `prefix` followed by the glob `pattern` (see [`glob_match`](crate::admin::glob_match)) as a
/// `LIKE` pattern with `\` as its escape character: `*` → `%`, `?` → `_`, literal `%`, `_`
/// and `\` escaped.
pub(crate) fn like_pattern(prefix: &str, pattern: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + pattern.len() + 4);
    let literal = |c: char, out: &mut String| {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    };
    prefix.chars().for_each(|c| literal(c, &mut out));
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '*' => out.push('%'),
            '?' => out.push('_'),
            '\\' => {
                if let Some(next) = chars.next() {
                    literal(next, &mut out);
                }
            }
            c => literal(c, &mut out),
        }
    }
    out
}

/// `table` (`name` or `schema.name`) with each part between `quote`s: `"schema"."table"` or
/// `"table"` on PostgreSQL, `` `schema`.`table` `` or `` `table` `` on MySQL (names are checked
/// to be letters, digits and `_`).
pub(crate) fn quoted(table: &str, quote: char) -> String {
    table
        .split('.')
        .map(|part| format!("{quote}{part}{quote}"))
        .collect::<Vec<_>>()
        .join(".")
}

/// The pooled connection for lock `name` among `slots` (FNV-1a of the name: cheap, and stable
/// for the process's life). Every statement about one lock goes through the same connection
/// (on PostgreSQL a plain lock's go through its acquisition's, chosen by load: see
/// `postgres::affinity`), which runs them in the order they were sent: the release sent in the
/// background for an abandoned acquisition can never overtake that acquisition.
pub(crate) fn slot_of(name: &str, slots: usize) -> usize {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (hash % slots as u64) as usize
}

/// A batched renewal's answer, one per spec: whether its name (as `name` gives it) is among
/// the names `renewed` (those still ours, renewed by it), or the error for each.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn renewed_by_name<N, Q>(
    specs: &[super::LockSpec<'_>],
    renewed: Result<impl IntoIterator<Item = N>, impl std::fmt::Display>,
    name: impl Fn(&str) -> &Q,
) -> Vec<Result<bool, String>>
where
    N: std::hash::Hash + Eq + std::borrow::Borrow<Q>,
    Q: std::hash::Hash + Eq + ?Sized,
{
    match renewed {
        Ok(names) => {
            let names: std::collections::HashSet<N> = names.into_iter().collect();
            specs
                .iter()
                .map(|s| Ok(names.contains(name(s.name))))
                .collect()
        }
        Err(error) => vec![Err(error.to_string()); specs.len()],
    }
}

/// Milliseconds of `d` for a statement parameter, at least 1.
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(url: &str, options: &SqlOptions) -> Result<(SqlSettings, String), LockError> {
        SqlSettings::from_url(url, options, Duration::from_secs(1), Duration::from_secs(1))
    }

    /// `pooler` and `listen_url` leave the driver's URL; `listen_url`'s own parameters come
    /// percent-encoded (as docs/guide/postgres.md writes them) and are decoded.
    #[test]
    fn pooler_parameters_leave_the_url_and_listen_url_is_decoded() {
        let (s, url) = settings(
            "postgres://u:p@pooler:6432/db?pooler=transaction&sslmode=disable&listen_url=postgres://u:p@db:5432/db%3Fsslmode%3Dverify-full%26sslrootcert%3D/ca.pem",
            &SqlOptions::default(),
        )
        .unwrap();
        assert_eq!(url, "postgres://u:p@pooler:6432/db?sslmode=disable");
        assert!(s.transaction_pooler);
        assert_eq!(
            s.listen_url.as_deref(),
            Some("postgres://u:p@db:5432/db?sslmode=verify-full&sslrootcert=/ca.pem")
        );
        let (s, _) = settings("postgres://h/db?pooler=session", &SqlOptions::default()).unwrap();
        assert!(!s.transaction_pooler && s.listen_url.is_none());
    }

    #[test]
    fn own_parameters_leave_the_url_and_the_builder_wins() {
        let (s, url) = settings(
            "postgres://u:p@h:5432/db?sslmode=disable&table=app.locks&pool_size=2&create_table=false",
            &SqlOptions::default(),
        )
        .unwrap();
        assert_eq!(url, "postgres://u:p@h:5432/db?sslmode=disable");
        assert_eq!(
            (s.table.as_str(), s.pool_size, s.create_table),
            ("app.locks", 2, false)
        );
        assert_eq!(s.fence_table(), "app.locks_fences");
        let (s, url) = settings(
            "mysql://h/db?table=t",
            &SqlOptions {
                table: Some("other".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!((url.as_str(), s.table.as_str()), ("mysql://h/db", "other"));
        let (s, _) = settings("postgres://h/db", &SqlOptions::default()).unwrap();
        assert_eq!(
            (s.table.as_str(), s.pool_size, s.create_table),
            (DEFAULT_TABLE, 4, true)
        );
    }

    #[test]
    fn bad_parameters_are_refused_with_the_reason() {
        let bad = |url: &str| {
            settings(url, &SqlOptions::default())
                .unwrap_err()
                .to_string()
        };
        assert!(bad("postgres://:secret@h/db?pool_size=0").contains("pool size must be 1 to 64"));
        let e = bad("postgres://:secret@h/db?pool_size=x");
        assert!(e.contains("pool_size=x") && !e.contains("secret"), "{e}");
        assert!(bad("postgres://h/db?create_table=maybe").contains("`true` or `false`"));
        for table in ["1abc", "a-b", "a.b.c", "", "robert'); drop table x;--"] {
            let e = bad(&format!("postgres://h/db?table={table}"));
            assert!(e.contains("invalid lock table name"), "{table}: {e}");
        }
        assert!(check_table_name(&"t".repeat(57)).is_err());
        assert!(check_table_name("public.distlock_locks").is_ok());
    }

    #[test]
    fn globs_become_like_patterns() {
        assert_eq!(like_pattern("lock:", "order:*"), "lock:order:%");
        assert_eq!(like_pattern("my_app:", "a?b\\*%"), "my\\_app:a_b*\\%");
    }

    #[test]
    fn holder_names_this_process() {
        assert!(holder_id().ends_with(&format!(" pid {}", std::process::id())));
    }
}
