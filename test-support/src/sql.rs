//! What the lock-table backends (PostgreSQL, MariaDB) share beyond the conformance and fault
//! suites, written once: tables made from the DDL the guide prints, and bad input at connect time.
//! `tests/it/postgres.rs` and `tests/it/mysql.rs` run each on their database.

use std::time::Duration;

use distlock::{LockClient, LockError};
use mysql_async::prelude::Queryable;

use super::faults::Faulty;
use super::fixture::{MysqlFixture, PostgresFixture};
use super::mysql::MysqlServer;
use super::postgres::PostgresServer;
use super::unique;

/// A database server of the tests, as these scenarios see it.
#[allow(async_fn_in_trait)]
pub trait SqlDatabase {
    /// The lock URL of the test database.
    fn url(&self) -> String;
    /// The lock URL of database `db` on the same server.
    fn url_for(&self, db: &str) -> String;
    /// The lock URL with a wrong password.
    fn url_with_password(&self, password: &str) -> String;
    /// The start of the DDL the guide (`docs/guide/<store>.md`) prints for this database.
    const GUIDE_DDL: &'static str;
    async fn execute(&self, statement: &str);
    async fn count(&self, query: &str) -> i64;
    async fn table_exists(&self, table: &str) -> bool;
}

impl SqlDatabase for PostgresServer {
    const GUIDE_DDL: &'static str =
        "CREATE TABLE IF NOT EXISTS distlock_locks (\n    name        text";

    fn url(&self) -> String {
        PostgresServer::url(self)
    }

    fn url_for(&self, db: &str) -> String {
        PostgresServer::url_for(self, db)
    }

    fn url_with_password(&self, password: &str) -> String {
        format!(
            "postgres://postgres:{password}@127.0.0.1:{}/postgres",
            self.port()
        )
    }

    async fn execute(&self, statement: &str) {
        let sql = self.client().await;
        sql.batch_execute(statement).await.expect(statement);
    }

    async fn count(&self, query: &str) -> i64 {
        let sql = self.client().await;
        sql.query_one(query, &[]).await.expect(query).get(0)
    }

    async fn table_exists(&self, table: &str) -> bool {
        let query = format!("SELECT count(*) FROM pg_tables WHERE tablename = '{table}'");
        self.count(&query).await > 0
    }
}

impl SqlDatabase for MysqlServer {
    const GUIDE_DDL: &'static str =
        "CREATE TABLE IF NOT EXISTS distlock_locks (\n    name        VARBINARY";

    fn url(&self) -> String {
        MysqlServer::url(self)
    }

    fn url_for(&self, db: &str) -> String {
        MysqlServer::url_for(self, db)
    }

    fn url_with_password(&self, password: &str) -> String {
        format!(
            "mysql://{}:{password}@127.0.0.1:{}/{}",
            super::mysql::USER,
            self.port(),
            super::mysql::DATABASE
        )
    }

    async fn execute(&self, statement: &str) {
        let mut conn = self.conn().await;
        conn.query_drop(statement).await.expect(statement);
    }

    async fn count(&self, query: &str) -> i64 {
        let mut conn = self.conn().await;
        let count: Option<i64> = conn.query_first(query).await.expect(query);
        count.expect("a count")
    }

    async fn table_exists(&self, table: &str) -> bool {
        let query =
            format!("SELECT count(*) FROM information_schema.tables WHERE table_name = '{table}'");
        self.count(&query).await > 0
    }
}

/// The guide prints the DDL; tables made from it work with `create_table=false`, and the
/// first fencing token is 1.
pub async fn tables_made_from_the_guides_ddl_work_without_create_table(db: &impl SqlDatabase) {
    let table = unique("migrated").replace('-', "_");
    // The guide's pages on the SQL stores (docs.rs: `distlock::guide::postgres`, `::mysql`).
    let guide = ["postgres", "mysql"]
        .map(|page| {
            let path = format!("{}/../docs/guide/{page}.md", env!("CARGO_MANIFEST_DIR"));
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
        })
        .concat();
    let start = guide
        .find(db_ddl(db))
        .expect("the guide prints the DDL of this database");
    let ddl = &guide[start..];
    let ddl = &ddl[..ddl.find("```").expect("the DDL block ends")];
    for statement in ddl.split(';').filter(|s| !s.trim().is_empty()) {
        db.execute(&statement.replace("distlock_locks", &table))
            .await;
    }
    let url = format!("{}?table={table}&create_table=false", db.url());
    let client = LockClient::builder(&url)
        .fencing(true)
        .build()
        .await
        .unwrap();
    let guard = client.lock("migrated").acquire().await.unwrap();
    assert_eq!(guard.fencing_token(), Some(1));
    guard.release().await.unwrap();
}

fn db_ddl<D: SqlDatabase>(_: &D) -> &'static str {
    D::GUIDE_DDL
}

/// An error at connect (`Connect` or `Config`), as text.
fn connect_error(error: LockError) -> String {
    assert!(
        matches!(error, LockError::Connect { .. } | LockError::Config(_)),
        "{error:?}"
    );
    error.to_string()
}

/// A wrong password, a missing database, a table of the wrong shape, a missing table with
/// `create_table=false`, an invalid table name, nothing listening: each fails at connect with an
/// error that names the cause (and the table), the password never printed; nothing is written
/// to the wrong table, nothing created.
pub async fn bad_input_fails_at_connect_naming_the_cause(db: &impl SqlDatabase) {
    let e = connect_error(
        LockClient::connect(&db.url_with_password("not-it"))
            .await
            .unwrap_err(),
    );
    assert!(
        e.contains("authentication failed") && !e.contains("not-it"),
        "{e}"
    );

    let e = connect_error(
        LockClient::connect(&db.url_for("no_such_db"))
            .await
            .unwrap_err(),
    );
    assert!(e.contains("\"no_such_db\" does not exist"), "{e}");

    let bad = unique("bad_shape").replace('-', "_");
    db.execute(&format!(
        "CREATE TABLE {bad} (name VARCHAR(255) PRIMARY KEY, owner TEXT)"
    ))
    .await;
    let e = connect_error(
        LockClient::connect(&format!("{}?table={bad}", db.url()))
            .await
            .unwrap_err(),
    );
    assert!(
        e.contains(&format!("`{bad}`"))
            && e.contains("does not have the shape")
            && e.contains("distlock::guide::"),
        "{e}"
    );
    assert_eq!(
        db.count(&format!("SELECT count(*) FROM {bad}")).await,
        0,
        "nothing written to a table of the wrong shape"
    );

    let missing = unique("missing").replace('-', "_");
    let e = connect_error(
        LockClient::connect(&format!("{}?table={missing}&create_table=false", db.url()))
            .await
            .unwrap_err(),
    );
    assert!(
        e.contains(&format!("`{missing}`")) && e.contains("does not exist") && e.contains("DDL"),
        "{e}"
    );
    assert!(
        !db.table_exists(&missing).await,
        "create_table=false creates nothing"
    );

    let e = connect_error(
        LockClient::connect(&format!("{}?table=x;drop", db.url()))
            .await
            .unwrap_err(),
    );
    assert!(e.contains("invalid lock table name"), "{e}");

    let scheme = db.url().split("://").next().unwrap().to_owned();
    let nobody = format!("{scheme}://u:pw@127.0.0.1:{}/db", super::free_port());
    let e = connect_error(LockClient::connect(&nobody).await.unwrap_err());
    assert!(
        e.contains("connection refused") && !e.contains(":pw@"),
        "{e}"
    );
}

/// Fifty locks, taken together as a burst of requests would take them (their renewals come due
/// together), held for 3 s with a 900 ms lease (renewed every 300 ms: 500 renewals unbatched):
/// the writes that reach the server's own counters are a few per round, no lock is lost, and
/// every expiry was moved forward.
pub async fn renewals_of_many_locks_are_batched(fixture: impl Faulty) {
    let client = fixture.client().await;
    let lease = Duration::from_millis(900);
    let mut taking = Vec::new();
    for i in 0..50 {
        let client = client.clone();
        taking.push(tokio::spawn(async move {
            client
                .lock(format!("many:{i}"))
                .lease(lease)
                .acquire()
                .await
        }));
    }
    let mut guards = Vec::new();
    for task in taking {
        guards.push(task.await.unwrap().unwrap());
    }
    let before = fixture.writes().await;
    let watched = Duration::from_secs(3);
    tokio::time::sleep(watched).await;
    let statements = fixture.writes().await - before;
    for (i, guard) in guards.iter().enumerate() {
        assert!(!guard.is_lost(), "a renewed lock was lost");
        let ttl = fixture.ttl(&format!("lock:many:{i}")).await;
        // Renewed at most a round (300 ms) and a read ago.
        assert!(
            ttl.is_some_and(|ttl| ttl > Duration::from_millis(450)),
            "lock {i}: its expiry was not moved forward ({ttl:?} left)"
        );
    }
    // 10 rounds: batched, each round is a statement or a few (locks whose renewals fall on
    // neighbouring 30 ms grid steps go separately).
    assert!(
        (5..=40).contains(&statements),
        "{statements} writes renewed 50 locks over {watched:?} (500 unbatched)"
    );
    eprintln!("50 locks, {watched:?}: {statements} renewal writes");
}

/// A lock table, as the row scenario reads it (its own SQL per database).
#[allow(async_fn_in_trait)]
pub trait LockTable: super::fixture::Fixture {
    /// The row of lock `name`: `(token, holder, until expiry, since acquired_at)` by the
    /// database's clock.
    async fn row(&self, name: &str) -> Option<(String, String, Duration, Duration)>;
    /// The fencing counter of lock `name` (its own table, `<table>_fences`).
    async fn fence(&self, name: &str) -> Option<i64>;
    /// How many rows the lock table holds.
    async fn rows_held(&self) -> i64;
    /// Inserts the row of a crashed owner of lock `name` whose expiry passed a second ago.
    async fn plant_expired(&self, name: &str);
}

impl LockTable for PostgresFixture {
    async fn row(&self, name: &str) -> Option<(String, String, Duration, Duration)> {
        let query = format!(
            "SELECT token, holder, (extract(epoch FROM expires_at - now()) * 1000)::int8, \
             (extract(epoch FROM now() - acquired_at) * 1000)::int8 FROM {} WHERE name = $1",
            self.table()
        );
        let row = self
            .sql()
            .await
            .query_opt(&query, &[&name])
            .await
            .unwrap()?;
        let ms = |i: usize| Duration::from_millis(row.get::<_, i64>(i).max(0) as u64);
        Some((row.get(0), row.get(1), ms(2), ms(3)))
    }

    async fn fence(&self, name: &str) -> Option<i64> {
        let query = format!("SELECT fence FROM {}_fences WHERE name = $1", self.table());
        let row = self
            .sql()
            .await
            .query_opt(&query, &[&name])
            .await
            .unwrap()?;
        Some(row.get(0))
    }

    async fn rows_held(&self) -> i64 {
        let query = format!("SELECT count(*) FROM {}", self.table());
        self.sql()
            .await
            .query_one(&query, &[])
            .await
            .unwrap()
            .get(0)
    }

    async fn plant_expired(&self, name: &str) {
        let insert = format!(
            "INSERT INTO {} VALUES ($1, 'crashed-owner', now() - interval '1 second', \
             'a crashed host pid 1', now() - interval '1 minute')",
            self.table()
        );
        self.sql().await.execute(&insert, &[&name]).await.unwrap();
    }
}

impl LockTable for MysqlFixture {
    async fn row(&self, name: &str) -> Option<(String, String, Duration, Duration)> {
        let query = format!(
            "SELECT token, holder, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), \
             TIMESTAMPDIFF(MICROSECOND, acquired_at, UTC_TIMESTAMP(6)) FROM {} WHERE name = ?",
            self.table()
        );
        let rows: Vec<(String, String, i64, i64)> = self.rows(&query, (name.as_bytes(),)).await;
        let (token, holder, left, since) = rows.into_iter().next()?;
        let us = |n: i64| Duration::from_micros(n.max(0) as u64);
        Some((token, holder, us(left), us(since)))
    }

    async fn fence(&self, name: &str) -> Option<i64> {
        let query = format!("SELECT fence FROM {}_fences WHERE name = ?", self.table());
        self.rows(&query, (name.as_bytes(),))
            .await
            .into_iter()
            .next()
    }

    async fn rows_held(&self) -> i64 {
        let query = format!("SELECT count(*) FROM {}", self.table());
        self.rows(&query, ()).await.into_iter().next().unwrap()
    }

    async fn plant_expired(&self, name: &str) {
        let insert = format!(
            "INSERT INTO {} VALUES (?, 'crashed-owner', UTC_TIMESTAMP(6) - INTERVAL 1 SECOND, \
             'a crashed host pid 1', UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE)",
            self.table()
        );
        self.rows::<i64>(&insert, (name.as_bytes(),)).await;
    }
}

/// The row names its holder (token, `host pid N`), expires by the database's clock (a 20 s lease
/// has 18–20 s left), `acquired_at` is the grant; the fencing counter lives in its own table and
/// keeps rising across releases, which leave no row. A row whose expiry passed is taken over,
/// whoever left it; lock names are bytes, compared exactly (case and trailing spaces make other
/// locks).
pub async fn the_row_names_its_holder_and_expires_by_the_database_clock(fixture: impl LockTable) {
    let client = fixture.builder().fencing(true).build().await.unwrap();
    let owner =
        |guard: &distlock::LockGuard| distlock::__private::testing::owner_token(guard).to_owned();
    let mut last_fence = 0;
    for round in 0..3 {
        let guard = client
            .lock("row")
            .lease(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap();
        let (token, holder, left, since) = fixture.row("lock:row").await.expect("a row");
        assert_eq!(token, owner(&guard));
        assert!(
            holder.ends_with(&format!(" pid {}", std::process::id())),
            "{holder}"
        );
        assert!(
            (Duration::from_secs(18)..=Duration::from_secs(20)).contains(&left),
            "expires in {left:?}"
        );
        assert!(since < Duration::from_secs(2), "acquired_at is the grant");
        let fence = fixture.fence("lock:row").await.expect("a fencing counter");
        assert_eq!(Some(fence as u64), guard.fencing_token());
        assert!(
            fence > last_fence,
            "round {round}: {fence} after {last_fence}"
        );
        last_fence = fence;
        guard.release().await.unwrap();
        assert_eq!(
            fixture.rows_held().await,
            0,
            "a released lock leaves no row"
        );
    }
    fixture.plant_expired("lock:stale").await;
    let taken = client
        .lock("stale")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("an expired row is taken over");
    assert_eq!(fixture.holder("lock:stale").await, Some(owner(&taken)));
    let upper = client.lock("STALE").wait(Duration::ZERO).acquire().await;
    assert!(upper.is_ok(), "`STALE` is another lock than `stale`");
    let spaced = client.lock("stale ").wait(Duration::ZERO).acquire().await;
    assert!(spaced.is_ok(), "`stale ` is another lock than `stale`");
}
