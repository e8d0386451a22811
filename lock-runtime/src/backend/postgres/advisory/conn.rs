//! A connection of `mode=advisory`: the client, the server incarnation a try on it checked,
//! and its release statements, prepared when it opens.

use std::sync::atomic::AtomicI64;
use std::time::Duration;

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, SimpleQueryMessage, Statement};

use super::note::function;
use crate::admin::advisory_key;
use crate::backend::Kind;
use crate::backend::postgres::errors::PgError;
use crate::backend::sql::errors::timed;

/// A connection, with the server incarnation a try on it found safe (0: none yet). A
/// connection lives on one incarnation — a restart ends it — so once a try on it has checked
/// the server's start against the safe one, the next tries on it need not check again.
///
/// Its release statements (a writer's, a reader's, an upgradable reader's) are prepared when
/// it opens, before it holds anything: a release carries no note, so one statement serves
/// every lock, and its one message both lets go and replaces the holder's note in
/// `pg_stat_activity` — a release whose answer is lost has either done both or neither (see
/// `after_failed_release`).
pub(super) struct AdvisoryConn {
    client: Client,
    pub(super) incarnation: AtomicI64,
    unlock: [Statement; 3],
}

/// An upgradable read's release: whether its share was still held, then every advisory lock
/// of the session — the share, the upgradable mark (`(hi, lo)`), the write lock if upgraded.
const UNLOCK_UPGRADABLE: &str = "SELECT pg_advisory_unlock_shared($1), pg_advisory_unlock_all(), \
     set_config('idle_session_timeout', '0', false)";

impl AdvisoryConn {
    /// `client`, its release statements prepared (one round trip).
    pub(super) async fn prepared(client: Client, limit: Duration) -> Result<AdvisoryConn, PgError> {
        let text = |kind| {
            format!(
                "SELECT {}($1), set_config('idle_session_timeout', '0', false)",
                function(kind, "advisory_unlock")
            )
        };
        let (writer, reader) = (text(Kind::Exclusive), text(Kind::Shared));
        // Sent together: one round trip.
        let all = futures_util::future::try_join3(
            client.prepare(&writer),
            client.prepare(&reader),
            client.prepare(UNLOCK_UPGRADABLE),
        );
        let (writer, reader, upgradable) =
            timed("preparing the advisory releases", limit, all).await?;
        Ok(AdvisoryConn {
            client,
            incarnation: AtomicI64::new(0),
            unlock: [writer, reader, upgradable],
        })
    }

    /// Lets go of `name`'s advisory lock (of `kind`; every lock of the session for an
    /// upgradable read, upgraded or not) and takes the idle timeout back, by the prepared
    /// statement, bounded by `limit`: whether it was held.
    pub(super) async fn unlock(
        &self,
        kind: Kind,
        upgradable: bool,
        name: &str,
        limit: Duration,
    ) -> Result<bool, PgError> {
        let statement = match (upgradable, kind) {
            (true, _) => &self.unlock[2],
            (false, Kind::Shared) => &self.unlock[1],
            (false, _) => &self.unlock[0],
        };
        let key = advisory_key(name);
        let params: [&(dyn ToSql + Sync); 1] = [&key];
        let row = timed(
            "the advisory release",
            limit,
            self.client.query_one(statement, &params),
        )
        .await?;
        row.try_get(0).map_err(PgError::from)
    }
}

/// What [`refusal`] reads, in one statement: the server's version number and the
/// `client_connection_check_interval` this connection runs with (NULL before PostgreSQL 14).
pub(super) const SERVER_SETTINGS: &str = "SELECT current_setting('server_version_num'), \
     current_setting('client_connection_check_interval', true)";

/// Why `mode=advisory` cannot run on a server of version number `version` whose connection
/// runs with `client_connection_check_interval = interval` (the startup options ask for 1s),
/// or `None`.
pub(super) fn refusal(version: &str, interval: &str) -> Option<String> {
    if version.parse::<u32>().unwrap_or(0) < 140_000 {
        return Some(format!(
            "`mode=advisory` needs PostgreSQL 14 or later (its `idle_session_timeout` ends a \
             silent holder's session, and its lock, one lease after its last statement); this \
             server is version {version}: use the lock table (leave out `mode=advisory`)"
        ));
    }
    // The startup options did not reach the server: a pooler that drops them (PgBouncer's
    // `ignore_startup_parameters = options`) would also hand the lock's session to others.
    (interval != "1s").then(|| {
        format!(
            "the server runs this connection with `client_connection_check_interval = \
             {interval}`, not the 1s `mode=advisory` asked for at connect: something between \
             drops startup options, as a connection pooler does (PgBouncer's \
             `ignore_startup_parameters`). An advisory lock belongs to a server session, which \
             a pooler in transaction mode hands to others: give `mode=advisory` a URL of the \
             server itself or of a pool in session mode, or use the lock table through the \
             pooler (leave out `mode=advisory`, add `pooler=transaction`)"
        )
    })
}

impl std::ops::Deref for AdvisoryConn {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

/// The first column of the first row of a simple query's answer.
pub(super) fn first_value(messages: &[SimpleQueryMessage], column: usize) -> Option<String> {
    messages.iter().find_map(|message| match message {
        SimpleQueryMessage::Row(row) => row.get(column).map(str::to_owned),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    /// A server before PostgreSQL 14 is refused for its version; a later one whose connection
    /// did not get the 1 s check interval (a pooler dropped the startup options) for that.
    #[test]
    fn refusals_name_the_version_or_the_dropped_options() {
        let old = super::refusal("130011", "").unwrap();
        assert!(
            old.contains("PostgreSQL 14") && old.contains("130011"),
            "{old}"
        );
        let dropped = super::refusal("150018", "0").unwrap();
        assert!(dropped.contains("drops startup options"), "{dropped}");
        assert_eq!(super::refusal("150018", "1s"), None);
    }
}
