//! Releases (by `EVALSHA`, the script given again to a server that lost it) and batched
//! renewals.

use std::time::Duration;

use redis::{Cmd, ErrorKind, RedisResult, Script};

use super::connection::{ACKED, Connection, SHARED};
use super::{RedisBackend, millis};
use crate::backend::{Kind, LockSpec, Released};
use crate::error::BoxError;

impl RedisBackend {
    /// Runs the release `script` (`scripts::release`, `release_read` or `release_fair`) on
    /// `keys` for `token`: what it saw.
    pub(super) async fn release_with(
        &self,
        script: &Script,
        keys: &[&str],
        token: &str,
    ) -> Result<Released, BoxError> {
        // A writer that gives its place up takes its mark back here (`scripts::release`).
        self.marked.forget(token);
        let mut retried = false;
        // With `?replicas`, on the grants' connection (without `WAIT`): behind every attempt
        // sent before it, so the release of a cancelled attempt can never overtake it.
        let lane = if self.settings.replicas > 0 {
            ACKED
        } else {
            SHARED
        };
        let released: i64 = self
            .run_on(lane, Duration::ZERO, None, |mut conn, attempt| {
                retried |= attempt > 0;
                let call = evalsha_keys_token(script, keys, token);
                async move { query_script(&mut conn, script, &call).await }
            })
            .await?;
        // A cluster connection retries a command inside (after a timeout or a dropped
        // connection, and counts redirections as retries), out of sight: any of its answers
        // may follow an earlier try that landed.
        retried |= self.is_cluster();
        Ok(Released::after_tries(released == 1, retried))
    }

    /// Renews `specs` (all in one slot when in a cluster) with one script call.
    pub(super) async fn renew_batch(&self, specs: &[LockSpec<'_>]) -> Result<Vec<bool>, BoxError> {
        let lease = specs
            .iter()
            .map(|spec| spec.lease)
            .min()
            .unwrap_or_default();
        let call = evalsha_renew_many(&self.renew_many, specs);
        let renewed: Vec<u8> = self
            .run_acked(
                lease,
                |renewed: &Vec<u8>| renewed.contains(&b'1'),
                |mut conn, _| {
                    let (script, call) = (&self.renew_many, &call);
                    async move { query_script(&mut conn, script, call).await }
                },
            )
            .await?;
        if renewed.len() != specs.len() {
            return Err(format!(
                "renewal script answered {} results for {} locks",
                renewed.len(),
                specs.len()
            )
            .into());
        }
        Ok(renewed.into_iter().map(|r| r == b'1').collect())
    }
}

/// `EVALSHA <script> <n> <keys…> <token>`, pre-sized: what a `ScriptInvocation` sends, without
/// its vector per key and argument and its growing command.
fn evalsha_keys_token(script: &Script, keys: &[&str], token: &str) -> Cmd {
    let hash = script.get_hash();
    let size = 7 + hash.len() + 2 + keys.iter().map(|k| k.len()).sum::<usize>() + token.len();
    let mut call = Cmd::with_capacity(4 + keys.len(), size);
    call.arg("EVALSHA").arg(hash).arg(keys.len());
    for key in keys {
        call.arg(*key);
    }
    call.arg(token);
    call
}

/// `EVALSHA <renew_many> <n> <names…> (<token> <lease ms> <shared>)…`, built straight into one
/// pre-sized command: a `ScriptInvocation` would allocate a vector per key and argument (four
/// per lock), copy them all into its command, then free them.
fn evalsha_renew_many(script: &Script, specs: &[LockSpec<'_>]) -> Cmd {
    let hash = script.get_hash();
    // A lease's milliseconds take at most 20 digits; most take 4 to 6.
    let size = 7
        + hash.len()
        + 6
        + specs
            .iter()
            .map(|spec| spec.name.len() + spec.token.len() + 8)
            .sum::<usize>();
    let mut call = Cmd::with_capacity(3 + 4 * specs.len(), size);
    call.arg("EVALSHA").arg(hash).arg(specs.len());
    for spec in specs {
        call.arg(spec.name);
    }
    for spec in specs {
        call.arg(spec.token)
            .arg(millis(spec.lease))
            .arg(u8::from(spec.kind != Kind::Exclusive));
    }
    call
}

/// Runs an `EVALSHA` of `script`; a server that no longer has the script (`NOSCRIPT`: restarted
/// empty, or `SCRIPT FLUSH`) is given it again and asked once more.
async fn query_script<T: redis::FromRedisValue>(
    conn: &mut Connection,
    script: &Script,
    call: &Cmd,
) -> RedisResult<T> {
    match call.query_async(conn).await {
        Err(error) if error.kind() == ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.load_async(conn).await?;
            call.query_async(conn).await
        }
        other => other,
    }
}
