//! PostgreSQL: the locks and the data they protect in one database, and a fencing token that
//! reaches the SQL write. A lease cannot stop a holder that is paused (a GC pause, SIGSTOP, a VM
//! migration) past its lease; the row can, if every write carries the writer's token and the
//! `UPDATE` refuses a token lower than the one the row already holds
//! ([`distlock::fence::SQL_FENCED_UPDATE`]).
//!
//! Holder A takes the lock `report:<id>` (a 1 s lease, not renewed) and writes the row. Then it
//! pauses past its lease; B is granted the lock with a higher token and writes. A resumes and
//! writes with its old token: the `UPDATE` matches no row, and the row keeps B's value. The
//! program exits non-zero if A's late write got through.
//!
//! ```text
//! DISTLOCK_URL=postgres://user:password@127.0.0.1:5432/database \
//!     cargo run --features postgres --example postgres
//! ```
//!
//! It creates, if missing, distlock's lock tables (`distlock_locks`, `distlock_locks_fences`)
//! and this example's table `distlock_example_reports`, and leaves them (and the row it wrote)
//! in the database. Tokens rise with every grant, so a second run writes over the first.

use std::time::Duration;

use distlock::fence::SQL_FENCED_UPDATE;
use distlock::{BoxError, LockClient, distributed_lock};
use tokio_postgres::{Client, NoTls};

/// The resource: one row per report, with the highest fencing token that has written it.
const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS distlock_example_reports (
    id    bigint PRIMARY KEY,
    value text   NOT NULL DEFAULT '',
    fence bigint NOT NULL DEFAULT 0
)";

/// Writes report `id` carrying the writer's fencing token, in one statement:
/// `UPDATE distlock_example_reports SET value = $2, fence = $1 WHERE id = $3 AND fence <= $1`.
/// `true`: written. `false`: no row updated, a holder with a higher token has written since.
async fn fenced_write(db: &Client, id: i64, value: &str, token: u64) -> Result<bool, BoxError> {
    let update = SQL_FENCED_UPDATE.replace("resource", "distlock_example_reports");
    let token = i64::try_from(token)?;
    Ok(db.execute(&update, &[&token, &value, &id]).await? == 1)
}

/// B's write, through the attribute: `fencing = true` gives the grant a token, and the body
/// reads it with `distlock::current()`.
#[distributed_lock(key = "report:<id>", fencing = true, lease = "10s", wait = "10s")]
async fn publish(db: &Client, id: i64, value: &str) -> Result<bool, BoxError> {
    let token = distlock::current()
        .and_then(|lock| lock.fencing_token())
        .ok_or("no fencing token")?;
    println!("B: granted `report:{id}` with token {token}; writing");
    fenced_write(db, id, value, token).await
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = match std::env::var(LockClient::URL_ENV) {
        Ok(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => url,
        _ => {
            eprintln!(
                "this example needs PostgreSQL: set DISTLOCK_URL=postgres://user:password@host:5432/database \
                 (and build with --features postgres)"
            );
            std::process::exit(2);
        }
    };
    let client = LockClient::connect(&url).await?;
    distlock::init(client.clone())?;

    // The application's own connection to the same database (distlock's `?table=…` and other
    // lock parameters are not the driver's, so they are cut off).
    let (db, connection) = tokio_postgres::connect(url.split('?').next().unwrap(), NoTls).await?;
    tokio::spawn(connection);
    db.execute(CREATE_TABLE, &[]).await?;
    let id: i64 = 1;
    db.execute(
        "INSERT INTO distlock_example_reports (id) VALUES ($1) ON CONFLICT (id) DO NOTHING",
        &[&id],
    )
    .await?;

    // A: a short lease, not renewed, as if its renewals stopped while it was paused.
    let a = client
        .lock(format!("report:{id}"))
        .fencing(true)
        .lease(Duration::from_secs(1))
        .renew(false)
        .acquire()
        .await?;
    let token_a = a.fencing_token().ok_or("no fencing token")?;
    let first = fenced_write(&db, id, "written by A", token_a).await?;
    println!("A: granted `report:{id}` with token {token_a}; first write: written {first}");

    // A pauses here. Its lease runs out, and B is granted the lock and writes.
    let by_b = publish(&db, id, "written by B").await?;
    println!("B: written {by_b}");

    // A resumes, unaware, and writes with its old token.
    println!(
        "A: resumes (its guard says lost: {}) and writes with token {token_a}",
        a.is_lost()
    );
    let late = fenced_write(&db, id, "A's late write", token_a).await?;
    let _ = a.release().await; // Err(Lost): the lock was no longer A's
    let row = db
        .query_one(
            "SELECT value, fence FROM distlock_example_reports WHERE id = $1",
            &[&id],
        )
        .await?;
    let (value, fence): (String, i64) = (row.get(0), row.get(1));
    println!("the row holds {value:?} with fence {fence}");

    if !first || !by_b {
        return Err("a write by the current holder was refused".into());
    }
    if late || value != "written by B" {
        return Err(format!("the stale write was ACCEPTED: the row holds {value:?}").into());
    }
    println!(
        "A's late write (token {token_a}) updated no row: stale write refused (the row's fence is {fence})"
    );
    Ok(())
}
