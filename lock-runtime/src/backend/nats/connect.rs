//! Connecting to NATS: the URL (servers, credentials, the bucket), the connection on the
//! caller's runtime, and the bucket — found and checked, or created with what locks need.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};

use super::{Conn, EVENTS, NatsBackend};
use crate::error::{BoxError, LockError};
use crate::runtime::{Revived, RuntimeBound};

/// How the client authenticates.
#[derive(Clone)]
pub(super) enum Auth {
    None,
    UserPassword(String, String),
    Token(String),
    Nkey(String),
    CredsFile(String),
}

impl NatsBackend {
    /// Parses the URL, connects (bounded by the connect timeout), and checks the bucket — or
    /// creates it with the settings locks need.
    pub(crate) async fn connect(
        url: &str,
        tls: Option<crate::tls::TlsConfig>,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Arc<NatsBackend>, LockError> {
        #[cfg_attr(not(feature = "tls"), allow(unused_mut))]
        let mut backend = NatsBackend::parse(url, connect_timeout, response_timeout)?;
        #[cfg(feature = "tls")]
        if let Some(tls) = tls {
            let config =
                tls.rustls(crate::tls::Verify::Full)
                    .map_err(|why| LockError::Connect {
                        url: backend.shown.clone(),
                        reason: why,
                        source: None,
                    })?;
            backend.tls = Some(config);
        }
        #[cfg(not(feature = "tls"))]
        let _ = tls;
        let started =
            tokio::time::timeout(connect_timeout + response_timeout, backend.conn()).await;
        match started {
            Ok(Ok(_)) => Ok(Arc::new(backend)),
            Ok(Err(error)) => Err(backend.connect_error(error)),
            Err(_) => Err(LockError::Connect {
                url: backend.shown.clone(),
                reason: format!(
                    "no answer within the connect timeout ({connect_timeout:?}): is nats-server \
                     running at that address, with JetStream on (`-js`)?"
                ),
                source: None,
            }),
        }
    }

    fn parse(
        url: &str,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<NatsBackend, LockError> {
        let shown = crate::url::redact_url(url);
        let bad = |why: String| LockError::Config(format!("invalid NATS URL {shown}: {why}"));
        let rest = url
            .strip_prefix("nats://")
            .or_else(|| url.strip_prefix("natss://"))
            .ok_or_else(|| bad("it must start with `nats://` (or `natss://` for TLS)".into()))?;
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let rest = rest.trim_end_matches('/');
        let (userinfo, hosts) = match rest.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, rest),
        };
        let mut auth = match userinfo {
            Some(userinfo) => match userinfo.split_once(':') {
                Some((user, password)) => Auth::UserPassword(
                    crate::url::percent_decode(user),
                    crate::url::percent_decode(password),
                ),
                None => Auth::Token(crate::url::percent_decode(userinfo)),
            },
            None => Auth::None,
        };
        let mut bucket = "distlock".to_owned();
        let mut replicas = 1;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = crate::url::percent_decode(value);
            match name {
                "bucket" => bucket = value,
                "replicas" => {
                    replicas = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=5).contains(n))
                        .ok_or_else(|| {
                            bad(format!("`replicas={value}`: the bucket's replicas, 1 to 5"))
                        })?;
                }
                "nkey" => auth = Auth::Nkey(value),
                "creds" => auth = Auth::CredsFile(value),
                other => {
                    return Err(bad(format!(
                        "unknown parameter `{other}`: known are `bucket`, `replicas`, `nkey` and \
                         `creds`"
                    )));
                }
            }
        }
        if bucket.is_empty()
            || !bucket
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(bad(format!(
                "`bucket={bucket}`: a bucket name is letters, digits, `-` and `_`"
            )));
        }
        let servers = crate::url::host_list(hosts, 4222)
            .map_err(bad)?
            .into_iter()
            .map(|host| format!("nats://{host}"))
            .collect();
        Ok(NatsBackend {
            shown,
            servers,
            auth,
            #[cfg(feature = "tls")]
            tls: None,
            bucket,
            replicas,
            connect_timeout,
            response_timeout,
            conn: Revived::new(),
            listener: Revived::new(),
            written: Arc::default(),
            in_flight: Arc::default(),
            news: Arc::default(),
            unanswered: Arc::default(),
        })
    }

    fn connect_error(&self, error: BoxError) -> LockError {
        let text = crate::tls::chain(&*error);
        #[cfg(feature = "tls")]
        let tls = self.tls.is_some();
        #[cfg(not(feature = "tls"))]
        let tls = false;
        let tls_hint = crate::tls::explain(&text, "cacert");
        let hint = if !tls && (tls_hint.is_some() || text.contains("TLS")) {
            "the server requires TLS: connect with `natss://` (and `cacert=/path/ca.pem` for a \
             CA of your own)"
        } else if let Some(hint) = &tls_hint {
            hint.as_str()
        } else if text.contains("authorization violation") || text.contains("uthorization") {
            "the server refused the credentials: check the user and password (nats://user:\
             password@host:port), the token (nats://token@host:port), `?nkey=` or `?creds=`"
        } else if text.contains("onnection refused") {
            "connection refused: is nats-server running at that address?"
        } else if text.contains("JetStream") || text.contains("jetstream") || text.contains("503") {
            "the server has no JetStream: start nats-server with `-js` (locks live in a \
             JetStream key-value bucket)"
        } else {
            "the connection failed"
        };
        LockError::Connect {
            url: self.shown.clone(),
            reason: format!("{hint} ({text})"),
            source: Some(error),
        }
    }

    /// The live connection, or a new one on the caller's runtime.
    pub(super) async fn conn(&self) -> Result<Arc<Conn>, BoxError> {
        self.conn
            .get(
                |conn: &Conn| conn.runtime.is_alive(),
                || Box::pin(self.open()),
            )
            .await
    }

    async fn open(&self) -> Result<Arc<Conn>, BoxError> {
        let mut options = async_nats::ConnectOptions::new()
            .name("distlock")
            .connection_timeout(self.connect_timeout)
            .request_timeout(Some(self.response_timeout));
        options = match &self.auth {
            Auth::None => options,
            Auth::UserPassword(user, password) => {
                options.user_and_password(user.clone(), password.clone())
            }
            Auth::Token(token) => options.token(token.clone()),
            Auth::Nkey(seed) => options.nkey(seed.clone()),
            Auth::CredsFile(path) => options.credentials_file(path).await?,
        };
        #[cfg(feature = "tls")]
        if let Some(config) = &self.tls {
            options = options.require_tls(true).tls_client_config(config.clone());
        }
        let client = options.connect(self.servers.as_slice()).await?;
        // Every JetStream request and publish ack bounded by the response timeout (acks
        // otherwise wait 5 s).
        let mut js = jetstream::new(client.clone());
        js.set_timeout(self.response_timeout);
        let stream = self.bucket_stream(&js).await?;
        Ok(Arc::new(Conn {
            client,
            js,
            stream,
            runtime: RuntimeBound::new(()),
        }))
    }

    /// The bucket's stream: found and checked, or created with what locks need — one
    /// message per key, per-message TTLs with markers when one runs out, and the republish
    /// that wakes waiters.
    async fn bucket_stream(&self, js: &jetstream::Context) -> Result<stream::Stream, BoxError> {
        let name = format!("KV_{}", self.bucket);
        let mut stream = match js.get_stream(&name).await {
            Ok(stream) => stream,
            Err(_) => {
                js.create_key_value(kv::Config {
                    bucket: self.bucket.clone(),
                    description: "distlock's locks".into(),
                    history: 1,
                    num_replicas: self.replicas,
                    limit_markers: Some(Duration::from_secs(1)),
                    republish: Some(stream::Republish {
                        source: format!("$KV.{}.>", self.bucket),
                        destination: format!("{EVENTS}.{}.>", self.bucket),
                        headers_only: true,
                    }),
                    ..Default::default()
                })
                .await?;
                js.get_stream(&name).await?
            }
        };
        let config = &stream.info().await?.config;
        let mut missing = Vec::new();
        if !config.allow_message_ttl || config.subject_delete_marker_ttl.is_none() {
            missing.push("per-key TTLs with markers (`limit_markers`, NATS 2.11+)");
        }
        if config.max_messages_per_subject != 1 {
            missing.push("one revision per key (`history: 1`)");
        }
        let republished = config.republish.as_ref().is_some_and(|republish| {
            republish.destination == format!("{EVENTS}.{}.>", self.bucket)
        });
        if !republished {
            missing.push("the republish that wakes waiters");
        }
        if !missing.is_empty() {
            return Err(format!(
                "the bucket `{}` exists without {}: name another with `?bucket=` (distlock \
                 creates it), or delete it",
                self.bucket,
                missing.join(", ")
            )
            .into());
        }
        Ok(stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(url: &str) -> Result<NatsBackend, LockError> {
        NatsBackend::parse(url, Duration::from_secs(3), Duration::from_secs(2))
    }

    #[test]
    fn the_url_names_servers_credentials_and_the_bucket() {
        let backend = parsed("nats://app:s%40cret@a:4222,b?bucket=orders&replicas=3").unwrap();
        assert_eq!(backend.servers, ["nats://a:4222", "nats://b:4222"]);
        assert!(matches!(&backend.auth, Auth::UserPassword(u, p) if u == "app" && p == "s@cret"));
        assert_eq!((backend.bucket.as_str(), backend.replicas), ("orders", 3));
        assert!(!backend.shown.contains("cret"), "{}", backend.shown);
        let backend = parsed("nats://t0ken@127.0.0.1").unwrap();
        assert!(matches!(&backend.auth, Auth::Token(t) if t == "t0ken"));
        assert_eq!(backend.bucket, "distlock");
        let backend = parsed("nats://h?nkey=SUABC").unwrap();
        assert!(matches!(&backend.auth, Auth::Nkey(seed) if seed == "SUABC"));
        let backend = parsed("nats://h?creds=/etc/app.creds").unwrap();
        assert!(matches!(&backend.auth, Auth::CredsFile(path) if path == "/etc/app.creds"));
        for (url, says) in [
            ("nats://h?bucket=a.b", "bucket=a.b"),
            ("nats://h?replicas=9", "replicas=9"),
            ("nats://h?colour=red", "unknown parameter `colour`"),
        ] {
            let error = parsed(url).err().unwrap().to_string();
            assert!(error.contains(says), "{url}: {error}");
        }
    }
}
