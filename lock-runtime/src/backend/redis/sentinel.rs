//! `redis+sentinel://[user:password@]s1:26379,s2:26379,s3:26379/service[/db]`: the master of a
//! Redis Sentinel deployment, found by asking the sentinels and found again after a failover.
//!
//! redis-rs's own `sentinel` module resolves a master once and does not follow failovers
//! (redis-rs issue #1438), so this one is ours, and small:
//!
//! - **Resolving**: `SENTINEL get-master-addr-by-name <service>` on the sentinels in turn
//!   (the one that answered last first), each bounded by the connect timeout; then `ROLE` on
//!   the address it names, which must say `master` (during a failover a sentinel may still name
//!   the old master, now a replica).
//! - **Following**: the backend forgets its connections and asks again when a command fails
//!   on a dropped or refused connection, or answers `READONLY` (the node was demoted); and a
//!   watcher subscribed to `+switch-master` on one sentinel makes it forget at once when the
//!   sentinels announce a new master of our service (an old master that is still up and
//!   reachable would otherwise keep taking our writes until it is told it is a replica).
//! - The pub/sub subscriber that wakes waiters connects to the resolved master too, and
//!   reconnects (resolving again) when its connection drops.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::{AsyncConnectionConfig, ErrorKind, RedisError, RedisResult};

use super::RedisBackend;
use crate::error::LockError;
use crate::runtime::RuntimeBound;
use crate::url::{host_list, redact_url};

/// A sentinel's port when the URL names none.
const SENTINEL_PORT: u16 = 26379;

/// The sentinels of one service and how to reach its master.
pub(crate) struct Sentinels {
    /// `host:port` and a client for each sentinel.
    nodes: Vec<(String, redis::Client)>,
    service: String,
    /// `redis://[userinfo@]` (`rediss://` with TLS) and `[/db]` around a master's `host:port`.
    master_prefix: String,
    /// TLS to the sentinels and the master (`rediss+sentinel://`).
    tls: Option<crate::tls::TlsConfig>,
    master_suffix: String,
    /// The sentinel that answered last: asked first next time.
    last: AtomicUsize,
    /// The backend this link belongs to, for the `+switch-master` watcher.
    pub(super) backend: Weak<RedisBackend>,
    /// The live `+switch-master` watcher, if any (bound to the runtime it runs on).
    watcher: Mutex<Option<RuntimeBound<()>>>,
}

impl Sentinels {
    /// Parses `redis+sentinel://[user:password@]s1[:port],s2[:port]/service[/db]` (the
    /// `replicas` option already taken out) with `?sentinel_user=…&sentinel_password=…` for
    /// sentinels that require a password of their own. Errors say what is wrong (no password).
    pub(crate) fn parse(
        url: &str,
        tls: Option<&crate::tls::TlsConfig>,
    ) -> Result<Sentinels, String> {
        let scheme = if tls.is_some() { "rediss" } else { "redis" };
        let shown = redact_url(url);
        let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let example = "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381/mymaster";
        if hosts.trim().is_empty() {
            return Err(format!(
                "`{shown}` names no sentinels: write them comma-separated before the service \
                 name, e.g. `{example}`"
            ));
        }
        let hosts = host_list(hosts, SENTINEL_PORT)
            .map_err(|e| format!("the sentinels in `{shown}`: {e}"))?;
        let mut segments = path.trim_start_matches('/').split('/');
        let service = segments.next().unwrap_or("").trim();
        if service.is_empty() {
            return Err(format!(
                "`{shown}` names no service: put the name the sentinels monitor (their `sentinel \
                 monitor <name> …` line) after the hosts, e.g. `{example}`"
            ));
        }
        let db = match segments.next() {
            None | Some("") => None,
            Some(db) => Some(db.parse::<u16>().map_err(|_| {
                format!("`{db}` in `{shown}` is not a database number (`…/{service}/0`)")
            })?),
        };
        if let Some(extra) = segments.find(|s| !s.is_empty()) {
            return Err(format!(
                "`{shown}` has `/{extra}` after the database: expected `…/service[/db]`"
            ));
        }
        let (mut sentinel_user, mut sentinel_password) = (None, None);
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair.split_once('=') {
                Some(("sentinel_user", value)) => sentinel_user = Some(value),
                Some(("sentinel_password", value)) => sentinel_password = Some(value),
                _ if pair.is_empty() => {}
                _ => {
                    let name = pair.split_once('=').map_or(pair, |(name, _)| name);
                    return Err(format!(
                        "`{shown}`: unknown option `{name}` (a Sentinel URL takes `replicas`, \
                         `sentinel_user` and `sentinel_password`)"
                    ));
                }
            }
        }
        let sentinel_auth = match (sentinel_user, sentinel_password) {
            (None, None) => String::new(),
            (user, password) => {
                format!("{}:{}@", user.unwrap_or(""), password.unwrap_or(""))
            }
        };
        let mut nodes = Vec::with_capacity(hosts.len());
        for host in hosts {
            let client = super::open_client(&format!("{scheme}://{sentinel_auth}{host}"), tls)
                .map_err(|e| format!("the sentinel `{host}` in `{shown}`: {e}"))?;
            nodes.push((host, client));
        }
        Ok(Sentinels {
            nodes,
            service: service.to_owned(),
            master_prefix: match userinfo {
                Some(userinfo) => format!("{scheme}://{userinfo}@"),
                None => format!("{scheme}://"),
            },
            tls: tls.cloned(),
            master_suffix: db.map_or_else(String::new, |db| format!("/{db}")),
            last: AtomicUsize::new(0),
            backend: Weak::new(),
            watcher: Mutex::new(None),
        })
    }

    pub(crate) fn service(&self) -> &str {
        &self.service
    }

    /// Asks the sentinels for the master and connects to it, checking it says it is one.
    /// A failure lists every sentinel asked and what each said; it is transient (an I/O
    /// error) unless every sentinel that answered said it knows no such service.
    pub(super) async fn connect_master(
        &self,
        config: &AsyncConnectionConfig,
        connect_timeout: Duration,
    ) -> RedisResult<(redis::Client, redis::aio::MultiplexedConnection)> {
        let address = self.ask(config, connect_timeout).await?;
        let client = super::open_client(
            &format!("{}{address}{}", self.master_prefix, self.master_suffix),
            self.tls.as_ref(),
        )?;
        let failed = |what: String| -> RedisError {
            io_error(format!(
                "the sentinels name {address} as the master of `{}`, but {what}",
                self.service
            ))
        };
        let mut conn = match client
            .get_multiplexed_async_connection_with_config(config)
            .await
        {
            Ok(conn) => conn,
            // A wrong password is the master's answer: say so, not "unreachable".
            Err(error)
                if error.kind() == ErrorKind::AuthenticationFailed
                    || matches!(error.code(), Some("NOAUTH" | "WRONGPASS")) =>
            {
                return Err(error);
            }
            Err(error) => return Err(failed(format!("it is unreachable ({error})"))),
        };
        let role: Vec<redis::Value> = redis::cmd("ROLE")
            .query_async(&mut conn)
            .await
            .map_err(|e| failed(format!("it did not answer ROLE ({e})")))?;
        match role.first() {
            Some(redis::Value::BulkString(role)) if role == b"master" => Ok((client, conn)),
            _ => Err(failed(
                "it says it is not a master (a failover is under way): asking again".to_owned(),
            )),
        }
    }

    /// `host:port` of the master, from the first sentinel that knows it.
    async fn ask(
        &self,
        config: &AsyncConnectionConfig,
        connect_timeout: Duration,
    ) -> RedisResult<String> {
        let count = self.nodes.len();
        let start = self.last.load(Ordering::Relaxed) % count;
        let mut said = Vec::with_capacity(count);
        let mut unknown = 0;
        for i in 0..count {
            let index = (start + i) % count;
            let (host, client) = &self.nodes[index];
            let asked = tokio::time::timeout(connect_timeout, async {
                let mut conn = client
                    .get_multiplexed_async_connection_with_config(config)
                    .await?;
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.service)
                    .query_async::<Option<(String, String)>>(&mut conn)
                    .await
            })
            .await;
            match asked {
                Ok(Ok(Some((ip, port)))) => {
                    self.last.store(index, Ordering::Relaxed);
                    let ip = if ip.contains(':') {
                        format!("[{ip}]")
                    } else {
                        ip
                    };
                    return Ok(format!("{ip}:{port}"));
                }
                Ok(Ok(None)) => {
                    unknown += 1;
                    said.push(format!(
                        "{host}: monitors no service named `{}`",
                        self.service
                    ));
                }
                Ok(Err(error)) if error.is_connection_refusal() => {
                    said.push(format!("{host}: connection refused"));
                }
                Ok(Err(error)) => said.push(format!("{host}: {error}")),
                Err(_) => said.push(format!("{host}: no answer within {connect_timeout:?}")),
            }
        }
        let message = format!(
            "no sentinel named a master for `{}` (asked {count}: {})",
            self.service,
            said.join("; ")
        );
        if unknown > 0 && unknown + said.iter().filter(|s| s.contains("refused")).count() == count {
            // Wrong name (or wrong sentinels): waiting will not cure it.
            return Err(RedisError::from((
                ErrorKind::MasterNameNotFoundBySentinel,
                "unknown service",
                message,
            )));
        }
        Err(io_error(message))
    }

    /// Starts the `+switch-master` watcher on the caller's runtime unless one runs.
    pub(super) fn watch(&self) {
        let mut watcher = self.watcher.lock().unwrap_or_else(|p| p.into_inner());
        if watcher.as_ref().is_some_and(RuntimeBound::is_alive) {
            return;
        }
        let clients: Vec<redis::Client> = self.nodes.iter().map(|(_, c)| c.clone()).collect();
        let service = self.service.clone();
        let backend = self.backend.clone();
        tokio::spawn(watch_switches(clients, service, backend));
        *watcher = Some(RuntimeBound::new(()));
    }
}

impl RedisBackend {
    /// The master of `url`'s service (`redis+sentinel://…`, its `replicas` option taken out);
    /// `shown` is the URL for messages. Asks the sentinels, connects, loads the scripts.
    pub(crate) async fn connect_sentinel(
        url: &str,
        shown: String,
        settings: super::RedisSettings,
    ) -> Result<Arc<RedisBackend>, LockError> {
        let sentinels = Sentinels::parse(url, settings.tls.as_ref()).map_err(LockError::Config)?;
        let backend = Arc::new_cyclic(|me| {
            let mut sentinels = sentinels;
            sentinels.backend = me.clone();
            RedisBackend::with_link(
                super::Link::Sentinel(sentinels),
                Vec::new(),
                "redis-sentinel",
                shown,
                settings,
            )
        });
        backend.check().await?;
        Ok(backend)
    }
}

/// Listens for `+switch-master <service> <old ip> <old port> <new ip> <new port>` on one
/// sentinel after another (the next when one's connection drops), and makes the backend forget
/// its connections when our service switches. Ends when the backend is gone.
async fn watch_switches(
    sentinels: Vec<redis::Client>,
    service: String,
    backend: Weak<RedisBackend>,
) {
    let mut next = fastrand::usize(..sentinels.len());
    while backend.strong_count() > 0 {
        let sentinel = &sentinels[next % sentinels.len()];
        next += 1;
        let subscribed = async {
            let mut pubsub = sentinel.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            RedisResult::Ok(pubsub)
        };
        let Ok(Ok(pubsub)) = tokio::time::timeout(Duration::from_secs(3), subscribed).await else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        let mut messages = pubsub.into_on_message();
        loop {
            let message = tokio::select! {
                message = messages.next() => message,
                // Checks now and then whether the backend is still there.
                () = tokio::time::sleep(Duration::from_secs(5)) => {
                    if backend.strong_count() == 0 {
                        return;
                    }
                    continue;
                }
            };
            let Some(message) = message else { break };
            let payload: String = message.get_payload().unwrap_or_default();
            if payload.split(' ').next() == Some(service.as_str()) {
                let Some(backend) = backend.upgrade() else {
                    return;
                };
                tracing::info!(service, switch = %payload, "distlock: sentinels switched the master");
                backend.forget_connections();
            }
        }
    }
}

/// An error that reads as a dropped connection (so it is retried) with our message.
pub(super) fn io_error(message: String) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        message,
    ))
}

#[cfg(test)]
mod tests {
    use super::Sentinels;

    #[test]
    fn sentinel_urls_name_sentinels_service_and_database() {
        let s = Sentinels::parse("redis+sentinel://:pw@a:1,b,[::1]:3/mymaster/2", None).unwrap();
        let hosts: Vec<&str> = s.nodes.iter().map(|(h, _)| h.as_str()).collect();
        assert_eq!(hosts, ["a:1", "b:26379", "[::1]:3"]);
        assert_eq!(s.service, "mymaster");
        assert_eq!(s.master_prefix, "redis://:pw@");
        assert_eq!(s.master_suffix, "/2");
        let with_auth = Sentinels::parse(
            "redis+sentinel://a/m?sentinel_password=sp&sentinel_user=u",
            None,
        )
        .unwrap();
        assert_eq!(
            with_auth.nodes[0]
                .1
                .get_connection_info()
                .addr()
                .to_string(),
            "a:26379"
        );

        for (url, says) in [
            ("redis+sentinel://:secret@/m", "names no sentinels"),
            ("redis+sentinel://a:1,b:2", "names no service"),
            ("redis+sentinel://a:1/", "names no service"),
            ("redis+sentinel://a:x/m", "`x` in `a:x` is not a port"),
            ("redis+sentinel://a/m/zero", "not a database number"),
            ("redis+sentinel://a/m/0/x", "after the database"),
            ("redis+sentinel://a/m?pool=3", "unknown option `pool`"),
        ] {
            let error = Sentinels::parse(url, None).err().expect(url);
            assert!(error.contains(says), "{url}: {error}");
            assert!(!error.contains("secret"), "{error}");
        }
    }
}
