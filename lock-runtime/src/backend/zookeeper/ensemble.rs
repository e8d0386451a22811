//! How sessions reach the ensemble: its hosts, TLS to the secure client port (`zks://`), digest
//! authentication (`user:password@`), and the ACL of the nodes made — open to every client, or,
//! with authentication, to this identity alone (ZooKeeper checks a delete against the parent's
//! ACL, so the lock parents carry it too).

use std::sync::Arc;
use std::time::Duration;

use zookeeper_client as zk;

use super::path::ZkUrl;
use crate::error::LockError;

/// Everything a connection needs; cheap to clone (the session closer keeps one).
#[derive(Clone)]
pub(super) struct Ensemble {
    pub(super) hosts: String,
    #[cfg(feature = "tls")]
    tls: Option<Tls>,
    digest: Option<Arc<[u8]>>,
}

#[cfg(feature = "tls")]
#[derive(Clone)]
struct Tls {
    /// For the ZooKeeper client.
    options: zk::TlsOptions,
    /// The same trust and identity for distlock's own handshakes (`srvr`, and telling why a
    /// session did not open).
    config: Arc<rustls::ClientConfig>,
}

impl Ensemble {
    /// From the parsed URL and, for `zks://`, its trust and identity.
    pub(super) fn new(
        url: &ZkUrl,
        tls: Option<crate::tls::TlsConfig>,
        shown: &str,
    ) -> Result<Ensemble, LockError> {
        let digest = url.digest.as_ref().map(|d| Arc::from(d.0.as_slice()));
        #[cfg(feature = "tls")]
        let tls = match tls {
            Some(tls) => Some(Tls::new(&tls, shown)?),
            None => None,
        };
        #[cfg(not(feature = "tls"))]
        let _ = (tls, shown);
        Ok(Ensemble {
            hosts: url.hosts.clone(),
            #[cfg(feature = "tls")]
            tls,
            digest,
        })
    }

    /// Whether sessions authenticate (and nodes carry an ACL of this identity alone).
    pub(super) fn authenticated(&self) -> bool {
        self.digest.is_some()
    }

    /// The ACL of every node this client makes: this identity's alone with authentication,
    /// open to every client without.
    pub(super) fn acls(&self) -> zk::Acls<'static> {
        match self.authenticated() {
            true => zk::Acls::creator_all(),
            false => zk::Acls::anyone_all(),
        }
    }

    /// Connects a client: `setup` sets the session's options on the connector, which carries
    /// TLS and authentication.
    pub(super) async fn connect(
        &self,
        setup: impl FnOnce(zk::Connector) -> zk::Connector,
    ) -> Result<zk::Client, zk::Error> {
        let mut connector = zk::Client::connector();
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            connector = connector.with_tls(tls.options.clone());
        }
        if let Some(digest) = &self.digest {
            connector = connector.with_auth("digest", digest);
        }
        let connector = setup(connector);
        #[cfg(feature = "tls")]
        if self.tls.is_some() {
            return connector.secure_connect(&self.hosts).await;
        }
        connector.connect(&self.hosts).await
    }

    /// Why a session did not open, when the first host's TLS handshake says (the ZooKeeper
    /// client retries a failed handshake until its timeout, and tells only that).
    pub(super) async fn why_not(&self, within: Duration) -> Option<String> {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            let host = self.hosts.split(',').next().unwrap_or_default();
            return crate::tls::why_handshake_fails(Arc::clone(&tls.config), host, within).await;
        }
        let _ = within;
        None
    }

    /// `srvr` on the first host (over TLS for `zks://`): what the server says of itself.
    pub(super) async fn srvr(&self) -> Option<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut answer = String::new();
        let host = self.hosts.split(',').next()?;
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            let mut stream = crate::tls::connect(Arc::clone(&tls.config), host)
                .await
                .ok()?;
            stream.write_all(b"srvr").await.ok()?;
            // A TLS server may end without close_notify: what was read still counts.
            let _ = stream.read_to_string(&mut answer).await;
            return Some(answer);
        }
        let mut stream = tokio::net::TcpStream::connect(host).await.ok()?;
        stream.write_all(b"srvr").await.ok()?;
        stream.read_to_string(&mut answer).await.ok()?;
        Some(answer)
    }
}

#[cfg(feature = "tls")]
impl Tls {
    fn new(tls: &crate::tls::TlsConfig, shown: &str) -> Result<Tls, LockError> {
        let bad = |what: String| LockError::Config(format!("{shown}: {what}"));
        let pem = |bytes: &Vec<u8>, what: &str| {
            String::from_utf8(bytes.clone()).map_err(|_| bad(format!("the {what} is not PEM text")))
        };
        let Some(ca) = &tls.ca_pem else {
            return Err(bad(
                "`zks://` needs the servers' CA certificate (`?cacert=/path/ca.pem`, or \
                 `TlsConfig::ca_pem`): the ZooKeeper client does not read the system's roots"
                    .into(),
            ));
        };
        // The ZooKeeper client builds its rustls settings with the process's default provider.
        crate::tls::ensure_default_provider();
        let mut options = zk::TlsOptions::new()
            .with_pem_ca(&pem(ca, "CA file")?)
            .map_err(|e| bad(format!("the CA file: {e}")))?;
        if let (Some(cert), Some(key)) = (&tls.cert_pem, &tls.key_pem) {
            options = options
                .with_pem_identity(&pem(cert, "client certificate")?, &pem(key, "client key")?)
                .map_err(|e| bad(format!("the client certificate or key: {e}")))?;
        }
        let config = tls
            .rustls(crate::tls::Verify::Full)
            .map_err(|e| bad(format!("TLS settings: {e}")))?;
        Ok(Tls {
            options,
            config: Arc::new(config),
        })
    }
}
