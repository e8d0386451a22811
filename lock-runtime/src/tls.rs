//! TLS for every backend: one stack (rustls, with ring's cryptography; no OpenSSL), the trust
//! and identity a URL names by file or the builder gives in code, and what a failed handshake
//! means in words a user can act on.
//!
//! Each store's URL names its files the way the store's own tools do (`cacert=` for Redis,
//! etcd and ZooKeeper, `sslrootcert=` for PostgreSQL, `ssl-ca=` for MySQL); they all end up
//! here, as one [`TlsConfig`].

// Each backend uses the part it needs; a build with some of them leaves the rest unused.
#![cfg_attr(not(every_store), allow(dead_code))]

use std::fmt;

use crate::error::LockError;

/// TLS trust and identity given in code, for what a URL cannot say (certificates that live in
/// a secret store rather than in files): [`LockClientBuilder::tls`](crate::LockClientBuilder::tls).
///
/// The server is verified against the system's roots unless a CA is given; a client
/// certificate with its key makes it mutual TLS. What is given here wins over the URL's file
/// parameters, field by field. Certificates and keys are PEM, as in the files.
///
/// ```no_run
/// # use distlock_runtime as distlock;
/// # async fn connect() -> Result<(), distlock::LockError> {
/// use distlock::{LockClient, TlsConfig};
///
/// // Certificates from a secret store rather than files the URL could name.
/// let ca = std::fs::read("/run/secrets/internal-ca.pem").expect("the CA");
/// let client = LockClient::builder("rediss://redis.internal:6380")
///     .tls(TlsConfig::new().ca_pem(ca))
///     .password(std::env::var("REDIS_PASSWORD").unwrap_or_default())
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
#[must_use = "a TLS configuration does nothing until given to `LockClientBuilder::tls`"]
pub struct TlsConfig {
    pub(crate) ca_pem: Option<Vec<u8>>,
    pub(crate) cert_pem: Option<Vec<u8>>,
    pub(crate) key_pem: Option<Vec<u8>>,
}

impl TlsConfig {
    /// Nothing given: the system's roots, no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trust these CA certificates (PEM, one or more) instead of the system's roots.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Present this client certificate (PEM chain, leaf first) with its private key (PEM:
    /// PKCS#8, PKCS#1 or SEC1): mutual TLS.
    pub fn client_identity(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.cert_pem = Some(cert_pem.into());
        self.key_pem = Some(key_pem.into());
        self
    }

    /// Whether anything is given.
    pub(crate) fn is_empty(&self) -> bool {
        self.ca_pem.is_none() && self.cert_pem.is_none() && self.key_pem.is_none()
    }

    /// `self` with what `code` gives put over it, field by field.
    pub(crate) fn overlaid(mut self, code: Option<&TlsConfig>) -> TlsConfig {
        if let Some(code) = code {
            if code.ca_pem.is_some() {
                self.ca_pem.clone_from(&code.ca_pem);
            }
            if code.cert_pem.is_some() {
                self.cert_pem.clone_from(&code.cert_pem);
                self.key_pem.clone_from(&code.key_pem);
            }
        }
        self
    }
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Whether each is set, never the key.
        f.debug_struct("TlsConfig")
            .field("ca_pem", &self.ca_pem.is_some())
            .field("client_identity", &self.cert_pem.is_some())
            .finish()
    }
}

/// The TLS files a URL names: the parameter each came from (for messages) and its path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    pub ca: Option<(&'static str, String)>,
    pub cert: Option<(&'static str, String)>,
    pub key: Option<(&'static str, String)>,
}

impl TlsFiles {
    /// Takes the parameters `names` (CA, certificate, key, in that order) out of `url`'s query
    /// string, percent-decoded: the URL without them, and the files. Other parameters, and the
    /// fragment, stay as they were.
    pub(crate) fn take(url: &str, names: [&'static str; 3]) -> (String, TlsFiles) {
        let mut files = TlsFiles::default();
        let url = crate::url::take_query(url, |name, value| {
            let slot = match names.iter().position(|n| *n == name) {
                Some(0) => &mut files.ca,
                Some(1) => &mut files.cert,
                Some(2) => &mut files.key,
                _ => return false,
            };
            let which = names[names.iter().position(|n| *n == name).unwrap_or(0)];
            *slot = Some((which, crate::url::percent_decode(value)));
            true
        });
        (url, files)
    }

    /// Whether the URL names no file.
    pub(crate) fn is_empty(&self) -> bool {
        self.ca.is_none() && self.cert.is_none() && self.key.is_none()
    }

    /// Reads the files, then puts what `code` gives over them. A file that cannot be read, or
    /// a certificate without its key, is an error naming the parameter, the path and `shown`
    /// (the server's URL, password redacted).
    pub(crate) fn load(
        &self,
        code: Option<&TlsConfig>,
        shown: &str,
    ) -> Result<TlsConfig, LockError> {
        let read = |file: &Option<(&'static str, String)>| -> Result<Option<Vec<u8>>, LockError> {
            let Some((name, path)) = file else {
                return Ok(None);
            };
            std::fs::read(path)
                .map(Some)
                .map_err(|error| LockError::Connect {
                    url: shown.to_owned(),
                    reason: format!("cannot read `{name}={path}`: {error}"),
                    source: Some(Box::new(error)),
                })
        };
        let tls = TlsConfig {
            ca_pem: read(&self.ca)?,
            cert_pem: read(&self.cert)?,
            key_pem: read(&self.key)?,
        }
        .overlaid(code);
        if tls.cert_pem.is_some() != tls.key_pem.is_some() {
            let (cert, key) = (
                self.cert.as_ref().map_or("cert", |(name, _)| name),
                self.key.as_ref().map_or("key", |(name, _)| name),
            );
            return Err(LockError::Config(format!(
                "{shown}: a client certificate needs its key and a key its certificate: give \
                 both `{cert}=` and `{key}=` (or `TlsConfig::client_identity`)"
            )));
        }
        Ok(tls)
    }
}

/// What a TLS handshake with a server that does not speak TLS on that port fails with.
const NOT_TLS: &str = "TLS was asked of a server that does not speak it on that port: use the \
                       plain form of the URL, or the server's TLS port";

/// What a failed TLS handshake (the error's text, with its sources) means, in words that say
/// what to check; `None` when it is no TLS failure.
pub(crate) fn explain(error: &str, ca_param: &str) -> Option<String> {
    let has = |needle: &str| error.contains(needle);
    if has("UnknownIssuer") || has("unknown issuer") || has("BadSignature") {
        Some(format!(
            "TLS: the server's certificate is not signed by a CA this client trusts: name the \
             CA's certificate with `{ca_param}=/path/ca.pem` in the URL (or \
             `TlsConfig::ca_pem`), or install it among the system's roots"
        ))
    } else if has("NotValidForName") || has("not valid for name") {
        Some(
            "TLS: the server's certificate is for another name than the host in the URL: \
             connect by a name the certificate lists (its subjectAltName)"
                .to_owned(),
        )
    } else if has("Expired") || has("expired") && has("certificate") {
        Some("TLS: the server's certificate has expired (or this machine's clock is wrong)".into())
    } else if has("CertificateRequired")
        || has("certificate required")
        || has("BadCertificate")
        || has("bad certificate")
        || has("UnknownCA")
        || has("unknown ca")
    {
        Some(
            "TLS: the server refused this client's certificate (or wants one): give a \
             certificate its CA trusts, with its key (`cert=`/`key=` in the URL, or \
             `TlsConfig::client_identity`)"
                .to_owned(),
        )
    } else if has("does not support TLS")
        || has("does not support SSL")
        || has("does not have this capability")
    {
        Some(
            "TLS was asked of a server that does not offer it: enable TLS on the server, or \
             connect without it"
                .to_owned(),
        )
    } else if has("InvalidContentType")
        || has("corrupt message")
        || has("InvalidMessage")
        || has("wrong version number")
        || has("UnexpectedEof") && has("handshake")
        // tokio-rustls's words for a peer that hung up mid-handshake: a plain server (etcd's
        // gRPC port) may reset the connection rather than answer a ClientHello.
        || has("handshake eof")
    {
        Some(NOT_TLS.to_owned())
    } else {
        None
    }
}

/// The error chain of `error` as one line (`a: b: c`), for [`explain`].
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

#[cfg(feature = "tls")]
#[cfg_attr(not(network_store), allow(unused_imports))]
pub(crate) use with_rustls::*;

#[cfg(feature = "tls")]
mod with_rustls {
    use std::sync::Arc;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::CryptoProvider;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
    use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

    use super::TlsConfig;

    /// The cryptography every connection uses: ring's.
    pub(crate) fn provider() -> Arc<CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    /// Makes ring's provider the process's default unless the application chose one: the
    /// Redis, MySQL and ZooKeeper clients build their TLS settings with the default, and
    /// rustls has none to pick when two providers are compiled in (ZooKeeper's client brings
    /// aws-lc-rs).
    pub(crate) fn ensure_default_provider() {
        if CryptoProvider::get_default().is_none() {
            // Another thread may install one between the check and here: either is fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    }

    /// A TLS connection with `config` to `host` (`name:port`, the name checked against the
    /// certificate).
    pub(crate) async fn connect(
        config: Arc<ClientConfig>,
        host: &str,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        let name = match host.rsplit_once(':') {
            Some((name, _)) => name.trim_start_matches('[').trim_end_matches(']'),
            None => host,
        };
        let name = ServerName::try_from(name.to_owned()).map_err(std::io::Error::other)?;
        let stream = tokio::net::TcpStream::connect(host).await?;
        tokio_rustls::TlsConnector::from(config)
            .connect(name, stream)
            .await
    }

    /// The error of a TLS connection to `host` with `config`: the handshake's, or the first
    /// read's (a TLS 1.3 server refuses a client certificate after the handshake); `None`
    /// when both go through (or the server stays silent), or `within` ends.
    pub(crate) async fn handshake_error(
        config: Arc<ClientConfig>,
        host: &str,
        within: std::time::Duration,
    ) -> Option<std::io::Error> {
        use tokio::io::AsyncReadExt;
        let attempt = async {
            let mut tls = connect(config, host).await?;
            let mut byte = [0u8; 1];
            match tokio::time::timeout(within / 4, tls.read(&mut byte)).await {
                Ok(Err(error)) => Err(error),
                _ => Ok(()),
            }
        };
        match tokio::time::timeout(within, attempt).await {
            Ok(Err(error)) => Some(error),
            _ => None,
        }
    }

    /// Why a TLS connection to `host` with `config` fails, in words that say what to check
    /// (the error's text with it); `None` when it does not fail within `within`. For drivers
    /// that hide a failed handshake's cause (they retry it, or report a bare "connection
    /// closed").
    pub(crate) async fn why_handshake_fails(
        config: Arc<ClientConfig>,
        host: &str,
        within: std::time::Duration,
    ) -> Option<String> {
        let error = handshake_error(config, host, within).await?;
        let chain = super::chain(&error);
        // A plain server (etcd's gRPC port) may also reset the connection, when it closes
        // with the ClientHello still unread: in a handshake that is what a reset means.
        let hint = super::explain(&chain, "cacert").or_else(|| {
            (error.kind() == std::io::ErrorKind::ConnectionReset).then(|| super::NOT_TLS.to_owned())
        });
        Some(match hint {
            Some(hint) => format!("{hint} ({chain})"),
            None => format!("the TLS handshake failed ({chain})"),
        })
    }

    /// Whether `host` answers a TLS handshake (its certificate unchecked): a plain-text URL
    /// pointed at a TLS port.
    pub(crate) async fn speaks_tls(host: &str, within: std::time::Duration) -> bool {
        let Ok(config) = TlsConfig::default().rustls(Verify::Nothing) else {
            return false;
        };
        let attempt = async {
            let name = ServerName::try_from("distlock.invalid").map_err(std::io::Error::other)?;
            let stream = tokio::net::TcpStream::connect(host).await?;
            tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(name, stream)
                .await
        };
        matches!(tokio::time::timeout(within, attempt).await, Ok(Ok(_)))
    }

    /// How much of the server's certificate to check.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) enum Verify {
        /// The chain up to a trusted root, and the host name (the default everywhere).
        Full,
        /// The chain, not the host name (PostgreSQL's `verify-ca`, MySQL's `VERIFY_CA`).
        Chain,
        /// Nothing: encryption against eavesdroppers only (libpq's `require` and `prefer`
        /// without a root certificate, MySQL's `REQUIRED` and `PREFERRED`, as those tools do).
        Nothing,
    }

    impl TlsConfig {
        /// The trusted roots: the given CA, or the system's.
        pub(crate) fn roots(&self) -> Result<RootCertStore, String> {
            let mut roots = RootCertStore::empty();
            match &self.ca_pem {
                Some(pem) => {
                    for cert in CertificateDer::pem_slice_iter(pem) {
                        let cert = cert.map_err(|e| format!("the CA file is not PEM ({e})"))?;
                        roots
                            .add(cert)
                            .map_err(|e| format!("the CA file holds a bad certificate ({e})"))?;
                    }
                    if roots.is_empty() {
                        return Err("the CA file holds no certificate".into());
                    }
                }
                None => {
                    let found = rustls_native_certs::load_native_certs();
                    let (added, _) = roots.add_parsable_certificates(found.certs);
                    if added == 0 {
                        return Err(format!(
                            "this machine has no trusted root certificates ({}): name the \
                             server's CA in the URL",
                            found
                                .errors
                                .first()
                                .map_or_else(|| "none found".to_owned(), ToString::to_string)
                        ));
                    }
                }
            }
            Ok(roots)
        }

        /// The client certificate chain and key, if given.
        #[allow(clippy::type_complexity)]
        pub(crate) fn identity(
            &self,
        ) -> Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>, String>
        {
            let (Some(cert), Some(key)) = (&self.cert_pem, &self.key_pem) else {
                return Ok(None);
            };
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("the client certificate is not PEM ({e})"))?;
            if chain.is_empty() {
                return Err("the client certificate file holds no certificate".into());
            }
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| format!("the client key is not a PEM private key ({e})"))?;
            Ok(Some((chain, key)))
        }

        /// A rustls client configuration with ring's cryptography, checking the server as
        /// `verify` says.
        pub(crate) fn rustls(&self, verify: Verify) -> Result<ClientConfig, String> {
            let builder = ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?;
            let builder = match verify {
                Verify::Full => builder.with_root_certificates(self.roots()?),
                Verify::Chain | Verify::Nothing => {
                    let chain = match verify {
                        Verify::Chain => Some(
                            rustls::client::WebPkiServerVerifier::builder_with_provider(
                                Arc::new(self.roots()?),
                                provider(),
                            )
                            .build()
                            .map_err(|e| e.to_string())?,
                        ),
                        _ => None,
                    };
                    let relaxed = Relaxed {
                        chain,
                        provider: provider(),
                    };
                    builder
                        .dangerous()
                        .with_custom_certificate_verifier(Arc::new(relaxed))
                }
            };
            match self.identity()? {
                Some((chain, key)) => builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("the client certificate and key do not fit ({e})")),
                None => Ok(builder.with_no_client_auth()),
            }
        }
    }

    /// What `verify-ca` and `require` check of the server: the chain without the host name
    /// (`chain` given), or nothing of the certificate (libpq's `require`); the handshake's
    /// signatures always.
    #[derive(Debug)]
    struct Relaxed {
        chain: Option<Arc<rustls::client::WebPkiServerVerifier>>,
        provider: Arc<CryptoProvider>,
    }

    impl ServerCertVerifier for Relaxed {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            let Some(chain) = &self.chain else {
                return Ok(ServerCertVerified::assertion());
            };
            match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
                Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForName,
                ))
                | Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            let algorithms = &self.provider.signature_verification_algorithms;
            rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            let algorithms = &self.provider.signature_verification_algorithms;
            rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.provider
                .signature_verification_algorithms
                .supported_schemes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain server that resets the connection with the ClientHello unread (etcd's gRPC
    /// port does, at times) is named as one that does not speak TLS.
    #[cfg(feature = "tls")]
    #[tokio::test]
    async fn a_reset_in_the_handshake_says_the_port_is_not_tls() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                // Waits for the hello, leaves it unread, and closes: a reset, not a FIN.
                let _ = socket.readable().await;
                let _ = socket.set_zero_linger();
                drop(socket);
            }
        });
        let config = TlsConfig::default().rustls(Verify::Nothing).unwrap();
        let why = why_handshake_fails(
            std::sync::Arc::new(config),
            &host,
            std::time::Duration::from_secs(5),
        )
        .await
        .expect("the handshake fails");
        assert!(why.contains("does not speak it"), "{why}");
    }

    #[test]
    fn tls_files_are_taken_out_of_the_query_and_decoded() {
        let (url, files) = TlsFiles::take(
            "rediss://h:1/0?cacert=/a%20b/ca.pem&replicas=1&cert=c.pem&key=k.pem#frag",
            ["cacert", "cert", "key"],
        );
        assert_eq!(url, "rediss://h:1/0?replicas=1#frag");
        assert_eq!(files.ca, Some(("cacert", "/a b/ca.pem".to_owned())));
        assert_eq!(files.cert, Some(("cert", "c.pem".to_owned())));
        assert_eq!(files.key, Some(("key", "k.pem".to_owned())));
        let (url, files) = TlsFiles::take("rediss://h:1", ["cacert", "cert", "key"]);
        assert_eq!(url, "rediss://h:1");
        assert!(files.is_empty());
    }

    #[test]
    fn a_missing_file_or_half_an_identity_is_named() {
        let (_, files) = TlsFiles::take(
            "x://h?sslrootcert=/nonexistent/ca.pem",
            ["sslrootcert", "sslcert", "sslkey"],
        );
        let error = files.load(None, "x://h").unwrap_err().to_string();
        assert!(
            error.contains("`sslrootcert=/nonexistent/ca.pem`"),
            "{error}"
        );
        assert!(error.contains("x://h"), "{error}");
        let half = TlsFiles {
            cert: Some(("cert", "/dev/null".into())),
            ..TlsFiles::default()
        };
        let error = half.load(None, "x://h").unwrap_err().to_string();
        assert!(error.contains("`cert=` and `key=`"), "{error}");
    }

    #[test]
    fn code_wins_over_the_url_and_debug_hides_the_key() {
        let files = TlsFiles {
            ca: Some(("cacert", "/dev/null".into())),
            ..TlsFiles::default()
        };
        let code = TlsConfig::new()
            .ca_pem(b"code".to_vec())
            .client_identity(b"c".to_vec(), b"SECRET".to_vec());
        let tls = files.load(Some(&code), "x://h").unwrap();
        assert_eq!(tls.ca_pem.as_deref(), Some(&b"code"[..]));
        assert!(!format!("{tls:?}").contains("SECRET"));
    }

    #[test]
    fn handshake_failures_are_explained() {
        let unknown = "invalid peer certificate: UnknownIssuer";
        assert!(
            explain(unknown, "cacert")
                .unwrap()
                .contains("`cacert=/path/ca.pem`")
        );
        assert!(
            explain("invalid peer certificate: NotValidForName", "x")
                .unwrap()
                .contains("another name")
        );
        assert!(
            explain("received corrupt message of type InvalidContentType", "x")
                .unwrap()
                .contains("does not speak it")
        );
        // A plain port that resets the connection instead of answering (seen on etcd's
        // under load): tokio-rustls says "tls handshake eof".
        assert!(
            explain("the TLS handshake failed (tls handshake eof)", "x")
                .unwrap()
                .contains("does not speak it")
        );
        assert_eq!(explain("connection refused", "x"), None);
    }
}
