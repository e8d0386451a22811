//! TLS to PostgreSQL with libpq's `sslmode` and its meanings, through rustls:
//!
//! | `sslmode` | TLS | what is checked |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (default) | if the server offers it | the chain if a CA is given (`sslrootcert=`), else nothing |
//! | `require` | always | the chain if a CA is given, else nothing |
//! | `verify-ca` | always | the chain (the given CA, or the system's roots) |
//! | `verify-full` | always | the chain and the host name |
//!
//! `sslcert=` and `sslkey=` present a client certificate (pg_hba's `cert` method, or
//! `clientcert=verify-full`). SCRAM authentication runs without channel binding.

use crate::error::LockError;
use crate::tls::TlsFiles;
use crate::url::redact_url;

// The connector every connection and cancel request uses: ours over rustls, or none.
#[cfg(feature = "tls")]
pub(super) use rustls_connect::MakeRustls as MakeTls;
#[cfg(not(feature = "tls"))]
pub(super) use tokio_postgres::NoTls as MakeTls;

/// A copy of `tls` for one connection or cancel: a clone of the rustls connector's shared
/// configuration, or (without the `tls` feature) `NoTls`, which is `Copy`.
#[allow(clippy::clone_on_copy)]
pub(super) fn connector(tls: &MakeTls) -> MakeTls {
    tls.clone()
}

/// A connection's I/O half, which must be polled for the client to work.
pub(super) type RawConnection = tokio_postgres::Connection<
    tokio_postgres::Socket,
    <MakeTls as tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>>::Stream,
>;

/// Takes `sslmode`, `sslrootcert`, `sslcert` and `sslkey` out of `driver_url` (the driver
/// knows only some of them), sets the driver's mode and returns the URL left and the connector.
/// `code` is what the builder gives ([`LockClientBuilder::tls`](crate::LockClientBuilder::tls)).
pub(super) fn secure(
    driver_url: &str,
    code: Option<&crate::tls::TlsConfig>,
) -> Result<(String, tokio_postgres::config::SslMode, MakeTls), LockError> {
    use tokio_postgres::config::SslMode;
    let mut mode = None;
    let url = crate::url::take_query(driver_url, |name, value| {
        (name == "sslmode")
            .then(|| mode = Some(value.to_owned()))
            .is_some()
    });
    let (url, files) = TlsFiles::take(&url, ["sslrootcert", "sslcert", "sslkey"]);
    let shown = redact_url(&url);
    let given = !files.is_empty() || code.is_some_and(|tls| !tls.is_empty());
    let mode = mode.as_deref().unwrap_or("prefer");
    let (driver_mode, verify) = match mode {
        "disable" if given => {
            return Err(LockError::Config(format!(
                "{shown} has `sslmode=disable` and TLS settings (`sslrootcert=`, `sslcert=`, \
                 `sslkey=` or `LockClientBuilder::tls`): drop one or the other"
            )));
        }
        "disable" => (SslMode::Disable, None),
        "prefer" if !cfg!(feature = "tls") && !given => (SslMode::Disable, None),
        "prefer" | "require" => (
            if mode == "prefer" {
                SslMode::Prefer
            } else {
                SslMode::Require
            },
            Some(given_ca(&files, code)),
        ),
        "verify-ca" | "verify-full" => (SslMode::Require, Some(mode == "verify-full")),
        other => {
            return Err(LockError::Config(format!(
                "`sslmode={other}` in {shown}: expected `disable`, `prefer` (the default), \
                 `require`, `verify-ca` or `verify-full` (libpq's meanings)"
            )));
        }
    };
    #[cfg(feature = "tls")]
    {
        use crate::tls::Verify;
        let tls = files.load(code, &shown)?;
        let verify = match (mode, verify) {
            ("verify-full", _) => Verify::Full,
            ("verify-ca", _) | (_, Some(true)) => Verify::Chain,
            _ => Verify::Nothing,
        };
        let config = tls.rustls(verify).map_err(|reason| LockError::Connect {
            url: shown.clone(),
            reason: format!("TLS settings: {reason}"),
            source: None,
        })?;
        Ok((
            url,
            driver_mode,
            rustls_connect::MakeRustls(std::sync::Arc::new(config)),
        ))
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = verify;
        if driver_mode != SslMode::Disable {
            return Err(LockError::Config(format!(
                "{shown} asks for TLS (`sslmode={mode}`, or TLS files), which needs distlock's \
                 `tls` feature: distlock = {{ version = \"…\", features = [\"tls\"] }}; or \
                 connect with `sslmode=disable`"
            )));
        }
        Ok((url, driver_mode, tokio_postgres::NoTls))
    }
}

/// Whether a CA is given (in the URL or in code): `prefer` and `require` then check the chain,
/// as libpq does when it finds a root certificate file.
fn given_ca(files: &TlsFiles, code: Option<&crate::tls::TlsConfig>) -> bool {
    files.ca.is_some() || code.is_some_and(|tls| tls.ca_pem.is_some())
}

#[cfg(feature = "tls")]
mod rustls_connect {
    use std::future::Future;
    use std::io;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
    use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

    /// Makes a TLS connector per connection, for its host; cheap to clone.
    #[derive(Clone)]
    pub(crate) struct MakeRustls(pub(super) Arc<rustls::ClientConfig>);

    pub(crate) struct RustlsConnect {
        config: Arc<rustls::ClientConfig>,
        host: String,
    }

    impl<S> MakeTlsConnect<S> for MakeRustls
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        type Stream = RustlsStream<S>;
        type TlsConnect = RustlsConnect;
        type Error = std::convert::Infallible;

        // Called for every connection, `sslmode=disable` included: a bad host name fails in
        // `connect`, only when TLS is used.
        fn make_tls_connect(&mut self, host: &str) -> Result<RustlsConnect, Self::Error> {
            Ok(RustlsConnect {
                config: Arc::clone(&self.0),
                host: host.to_owned(),
            })
        }
    }

    impl<S> TlsConnect<S> for RustlsConnect
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        type Stream = RustlsStream<S>;
        type Error = io::Error;
        type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

        fn connect(self, stream: S) -> Self::Future {
            Box::pin(async move {
                // An IP address is checked against the certificate's IP names (and sends no SNI).
                let name = ServerName::try_from(self.host)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                let tls = tokio_rustls::TlsConnector::from(self.config)
                    .connect(name, stream)
                    .await?;
                Ok(RustlsStream(tls))
            })
        }
    }

    pub(crate) struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

    impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
        fn channel_binding(&self) -> ChannelBinding {
            ChannelBinding::none()
        }
    }

    impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_read(cx, buf)
        }
    }

    impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.0).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_shutdown(cx)
        }
    }
}

#[cfg(all(test, feature = "tls"))]
mod tests {
    use tokio_postgres::config::SslMode;

    use super::secure;

    #[test]
    fn sslmode_and_files_leave_the_driver_url() {
        let (url, mode, _) =
            secure("postgres://u@h/db?sslmode=require&application_name=x", None).unwrap();
        assert_eq!(url, "postgres://u@h/db?application_name=x");
        assert_eq!(mode, SslMode::Require);
        let (url, mode, _) = secure("postgres://u@h/db", None).unwrap();
        assert_eq!((url.as_str(), mode), ("postgres://u@h/db", SslMode::Prefer));
        let (_, mode, _) = secure("postgres://u@h/db?sslmode=disable", None).unwrap();
        assert_eq!(mode, SslMode::Disable);
        let (_, mode, _) = secure("postgres://u@h/db?sslmode=verify-full", None).unwrap();
        assert_eq!(mode, SslMode::Require);
    }

    #[test]
    fn bad_modes_and_contradictions_are_refused() {
        for url in [
            "postgres://u:pw@h/db?sslmode=allow",
            "postgres://u:pw@h/db?sslmode=disable&sslrootcert=/x",
            "postgres://u:pw@h/db?sslmode=verify-full&sslrootcert=/nonexistent",
        ] {
            let error = secure(url, None).err().expect(url).to_string();
            assert!(!error.contains("pw@"), "{error}");
        }
    }
}
