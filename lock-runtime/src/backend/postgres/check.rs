//! What [`LockClient::check`](crate::LockClient::check) reports of PostgreSQL beyond the lock it
//! takes: the server's clock against this host's, and a transaction pooler between client and
//! server that the URL does not declare.

use std::time::Duration;

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, SimpleQueryMessage};

use super::PostgresBackend;
use crate::admin::{Finding, clock_check, identity_finding};
use crate::error::BoxError;

impl PostgresBackend {
    /// The lock's own statements and nothing around them: its acquisition, then its quiet
    /// release (`LockClient::raw_pair`).
    pub(super) async fn raw_pair_of(
        &self,
        name: &str,
        token: &str,
        lease: Duration,
    ) -> Result<(), BoxError> {
        let lease = crate::backend::sql::millis(lease);
        let params: [&(dyn ToSql + Sync); 4] = [&name, &token, &lease, &self.holder];
        let taken = self
            .run("the raw pair", name, |conn| async move {
                conn.execute(&conn.acquire, &params).await
            })
            .await?;
        if taken != 1 {
            return Err(format!("`{name}` is held: nothing taken").into());
        }
        let params: [&(dyn ToSql + Sync); 2] = [&name, &token];
        self.run("the raw pair", name, |conn| async move {
            conn.execute(&conn.release_quiet, &params).await
        })
        .await?;
        Ok(())
    }

    pub(super) async fn diagnose_server(&self) -> Vec<Finding> {
        vec![
            self.identity().await,
            self.clock().await,
            self.pooler().await,
        ]
    }

    /// Who the server says this client is, and its connection's TLS as the server sees it
    /// (`pg_stat_ssl`).
    async fn identity(&self) -> Finding {
        let read = self
            .run("the identity query", "", |conn| async move {
                conn.text(
                    "SELECT current_user::text, s.ssl, s.version FROM pg_stat_ssl s \
                     WHERE s.pid = pg_backend_pid()",
                    &[],
                    &[],
                )
                .await
            })
            .await;
        let row = read.ok().and_then(|rows| rows.into_iter().next());
        let user: Option<String> = row.as_ref().and_then(|row| row.try_get(0).ok());
        let ssl = row
            .as_ref()
            .is_some_and(|row| row.try_get(1).unwrap_or(false));
        let version: Option<String> = row.as_ref().and_then(|row| row.try_get(2).ok().flatten());
        let tls = ssl.then(|| version.unwrap_or_default());
        identity_finding(user.as_deref(), tls.as_deref())
    }

    /// `clock_timestamp()` against this host's clock. The lock statements judge a lease by
    /// the server's `now()`.
    async fn clock(&self) -> Finding {
        clock_check(async {
            let rows = self
                .run("the clock query", "", |conn| async move {
                    conn.text(
                        "SELECT extract(epoch FROM clock_timestamp())::float8",
                        &[],
                        &[],
                    )
                    .await
                })
                .await
                .ok()?;
            rows.first()?.try_get::<_, f64>(0).ok()
        })
        .await
    }

    /// Whether a transaction pooler sits between (PgBouncer in `pool_mode = transaction`):
    /// two connections of the check's own, the first asks for its server process, the second
    /// opens a transaction, and the first asks again. Straight to the server (or through a
    /// session pooler) a connection keeps its process; through a transaction pooler the first
    /// connection's process went to the second's transaction (poolers lend the server
    /// connection used last), and the first is answered by another.
    async fn pooler(&self) -> Finding {
        if self.settings.transaction_pooler {
            return Finding::pass(
                "pooler",
                "`pooler=transaction`: each statement stands alone, as a transaction pooler \
                 needs",
            );
        }
        let bound = self.settings.connect_timeout * 2 + self.settings.response_timeout * 4;
        match tokio::time::timeout(bound, self.processes_seen()).await {
            Ok(Ok((first, second))) if first == second => Finding::pass(
                "pooler",
                "no transaction pooler between (a connection keeps its server process)",
            ),
            Ok(Ok((first, second))) => Finding::fail(
                "pooler",
                format!(
                    "a transaction pooler is between (one connection was served by server \
                     processes {first} and then {second}), and the URL does not say so: \
                     prepared statements and `LISTEN` do not survive it"
                ),
                "add `pooler=transaction` to the URL (and `listen_url=` naming the server \
                 itself, so that waiters hear releases)",
            ),
            Ok(Err(error)) => Finding::pass(
                "pooler",
                format!("could not tell whether a pooler is between ({error})"),
            ),
            Err(_) => Finding::pass(
                "pooler",
                format!("could not tell whether a pooler is between (no answer within {bound:?})"),
            ),
        }
    }

    /// The first connection's server process before and after the second opened a
    /// transaction.
    async fn processes_seen(&self) -> Result<(String, String), BoxError> {
        let (first, second) = (self.open().await?, self.open().await?);
        let before = backend_pid(&first, "SELECT pg_backend_pid()").await?;
        backend_pid(&second, "BEGIN; SELECT pg_backend_pid()").await?;
        let after = backend_pid(&first, "SELECT pg_backend_pid()").await;
        let _ = second.simple_query("ROLLBACK").await;
        Ok((before, after?))
    }
}

/// The server process id the last statement of `text` returns (the simple query protocol:
/// nothing prepared, so a pooler may carry it).
async fn backend_pid(client: &Client, text: &str) -> Result<String, BoxError> {
    // (Bounded by the caller, with the whole probe.)
    let answer = client.simple_query(text).await?;
    answer
        .iter()
        .rev()
        .find_map(|message| match message {
            SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .ok_or_else(|| "no process id in the answer".into())
}
