//! Redis errors: which are transient (retried), which say a failover is under way, and what a
//! failed connection tells the user to check.

use redis::{ErrorKind, RedisError};

use super::connection::is_not_acked;
use super::{Link, RedisBackend};
use crate::backend::Transient;
use crate::error::{BoxError, LockError};

impl RedisBackend {
    /// Turns a connection-time failure into an error that says what to check.
    pub(super) fn connect_error(&self, error: RedisError) -> LockError {
        let authentication = error.kind() == ErrorKind::AuthenticationFailed
            || matches!(error.code(), Some("NOAUTH" | "WRONGPASS"));
        if let (Link::Sentinel(sentinels), false) = (&self.link, authentication) {
            let hint = match error.kind() {
                ErrorKind::MasterNameNotFoundBySentinel => format!(
                    "check the service name: it is the name in the sentinels' `sentinel monitor \
                     <name> …` line (asked for `{}`)",
                    sentinels.service()
                ),
                _ => "Redis Sentinel: is every sentinel down, or the master unreachable?".into(),
            };
            return LockError::Connect {
                url: self.url.clone(),
                reason: format!("{hint} ({error})"),
                source: Some(Box::new(error)),
            };
        }
        let mut tls = crate::tls::explain(&crate::tls::chain(&error), "cacert");
        let hint = match error.kind() {
            _ if error.code() == Some("NOAUTH") => {
                "the server requires a password: put it in the URL (redis://:password@host:port)"
                    .to_string()
            }
            _ if error.code() == Some("WRONGPASS") => {
                "authentication failed: check the user and password in the URL \
                 (redis://user:password@host:port)"
                    .to_string()
            }
            ErrorKind::AuthenticationFailed => {
                "authentication failed: check the user and password in the URL \
                 (redis://user:password@host:port)"
                    .to_string()
            }
            _ if error.is_connection_refusal() => {
                "connection refused: is redis-server running at that address?".to_string()
            }
            _ if error.is_timeout() && self.settings.tls.is_some() => format!(
                "no answer within the connect timeout ({:?}): is the host reachable, and does \
                 it speak TLS on that port? (a plain-text server stays silent to a TLS \
                 handshake: use `redis://` for it)",
                self.settings.connect_timeout
            ),
            _ if error.is_timeout() => format!(
                "no answer within the connect timeout ({:?}): is the host reachable?",
                self.settings.connect_timeout
            ),
            _ if error.to_string().contains("cluster support disabled") => {
                "this server is not part of a Redis Cluster (`cluster-enabled no`): use \
                 `redis://` for one server, or `redlock://h1:p1,h2:p2,h3:p3` for independent ones"
                    .to_string()
            }
            _ if no_lua(&error) => "the server runs no Lua scripts, which every distlock lock \
                 is made of: Valkey 9 loads Lua as a module (is it unloaded, or the server \
                 built without it? `MODULE LIST` should show `lua`); scripting may also be \
                 disabled by the provider (`EVAL` renamed or refused)"
                .to_string(),
            _ if tls.is_some() => tls.take().unwrap_or_default(),
            _ if self.settings.tls.is_none() && closed_at_once(&error) => {
                "the server closed the connection at once: if it accepts TLS only, use \
                 `rediss://` (and `?cacert=/path/ca.pem` for a private CA)"
                    .to_string()
            }
            _ => "the connection failed".to_string(),
        };
        LockError::Connect {
            url: self.url.clone(),
            reason: format!("{hint} ({error})"),
            source: Some(Box::new(error)),
        }
    }
}

/// Whether a connection failed because the server hung up on the first bytes (what a TLS-only
/// port does with a plain-text client).
fn closed_at_once(error: &RedisError) -> bool {
    let text = crate::tls::chain(error).to_lowercase();
    error.is_connection_dropped()
        || [
            "connection reset",
            "broken pipe",
            "unexpected end of file",
            "unexpectedeof",
            "connection closed",
        ]
        .iter()
        .any(|needle| text.contains(needle))
}

/// Whether an acquisition failed because too few replicas acknowledged its grant.
pub(super) fn not_acked(error: &BoxError) -> bool {
    error
        .downcast_ref::<Transient>()
        .and_then(|t| t.0.downcast_ref::<RedisError>())
        .is_some_and(is_not_acked)
}

/// Behind Sentinel: whether a failed release is retried while the lease lasts — the
/// connection dropped or timed out, or the node we wrote to is no longer the master (a failover
/// in progress, over within seconds).
pub(super) fn rides_out_failover(error: &BoxError) -> bool {
    error.downcast_ref::<RedisError>().is_some_and(|e| {
        is_transient(e) || e.kind() == ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
    })
}

/// Errors worth retrying on a fresh connection: the command may or may not have run, so every
/// operation is written to be safe to repeat with the same token.
pub(super) fn is_transient(error: &RedisError) -> bool {
    if error.kind() == ErrorKind::AuthenticationFailed {
        return false;
    }
    error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || matches!(
            error.retry_method(),
            redis::RetryMethod::Reconnect
                | redis::RetryMethod::RetryImmediately
                | redis::RetryMethod::WaitAndRetry
        )
}

/// An acquisition's error: transient (retried while the request's `wait` lasts) when the
/// connection dropped, timed out or was refused, or the server said to try again (a cluster
/// failover, a server loading its data); permanent otherwise (authentication, a script error,
/// a lock key holding a value of another type).
pub(crate) fn acquire_error(error: RedisError) -> BoxError {
    let transient = is_transient(&error) || is_not_acked(&error);
    Transient::wrap_if(transient, error)
}

/// The server cannot run Lua: Valkey 9 without its Lua module ("Could not find scripting engine
/// 'lua'"), or `EVAL`/`SCRIPT` renamed or disabled ("unknown command").
fn no_lua(error: &RedisError) -> bool {
    let text = error.to_string();
    text.contains("scripting engine")
        || (text.contains("unknown command")
            && [
                "'SCRIPT'",
                "'script'",
                "'EVAL'",
                "'eval'",
                "'EVALSHA'",
                "'evalsha'",
            ]
            .iter()
            .any(|command| text.contains(command)))
}
