//! TLS to MySQL and MariaDB with the MySQL client's `ssl-mode` and its meanings, through
//! rustls:
//!
//! | `ssl-mode` | TLS | what is checked |
//! |---|---|---|
//! | `DISABLED` | never | — |
//! | `PREFERRED` (default) | if the server offers it | nothing |
//! | `REQUIRED` | always | nothing |
//! | `VERIFY_IDENTITY` | always | the chain (the CA of `ssl-ca=`, or the built-in Mozilla roots) and the host name |
//!
//! `ssl-cert=` and `ssl-key=` present a client certificate (a user `REQUIRE X509`).
//! `VERIFY_CA` (the chain without the name), and `ssl-ca=` with the unverified modes (which
//! MySQL's client would verify as `VERIFY_CA`), are refused with the way out: the driver
//! (mysql_async 0.37) cannot skip the name check alone.

use crate::error::LockError;
use crate::tls::TlsFiles;
use crate::url::redact_url;

/// How connections are made, from the URL's `ssl-mode` and files.
#[derive(Debug)]
pub(super) enum Secure {
    /// `DISABLED`, or the default in a build without the `tls` feature.
    Plain,
    /// TLS always.
    #[cfg(feature = "tls")]
    Tls(mysql_async::SslOpts),
    /// `PREFERRED`: TLS when the server offers it (asked once, when connecting).
    #[cfg(feature = "tls")]
    Preferred(mysql_async::SslOpts),
}

/// Takes `ssl-mode`, `ssl-ca`, `ssl-cert` and `ssl-key` out of `driver_url` (the driver would
/// refuse them): the URL left, and how to connect. `code` is what the builder gives.
pub(super) fn secure(
    driver_url: &str,
    code: Option<&crate::tls::TlsConfig>,
) -> Result<(String, Secure), LockError> {
    let mut mode = None;
    let url = crate::url::take_query(driver_url, |name, value| {
        (name == "ssl-mode" || name == "ssl_mode")
            .then(|| mode = Some(value.to_ascii_uppercase()))
            .is_some()
    });
    let (url, files) = TlsFiles::take(&url, ["ssl-ca", "ssl-cert", "ssl-key"]);
    let shown = redact_url(&url);
    let given_ca = files.ca.is_some() || code.is_some_and(|tls| tls.ca_pem.is_some());
    let given = !files.is_empty() || code.is_some_and(|tls| !tls.is_empty());
    let mode = mode.as_deref().unwrap_or("PREFERRED");
    match mode {
        "DISABLED" if given => Err(LockError::Config(format!(
            "{shown} has `ssl-mode=DISABLED` and TLS settings (`ssl-ca=`, `ssl-cert=`, \
             `ssl-key=` or `LockClientBuilder::tls`): drop one or the other"
        ))),
        "DISABLED" => Ok((url, Secure::Plain)),
        "PREFERRED" if !cfg!(feature = "tls") && !given => Ok((url, Secure::Plain)),
        "PREFERRED" | "REQUIRED" if given_ca => Err(LockError::Config(format!(
            "`ssl-ca=` with `ssl-mode={mode}` in {shown}: MySQL's client would check the \
             server's chain without its name (VERIFY_CA), which distlock's MySQL driver cannot \
             do; use `ssl-mode=VERIFY_IDENTITY` (the chain and the host name)"
        ))),
        "VERIFY_CA" => Err(LockError::Config(format!(
            "`ssl-mode=VERIFY_CA` in {shown}: distlock's MySQL driver cannot check the chain \
             without the host name; use `ssl-mode=VERIFY_IDENTITY` (connect by a name the \
             server's certificate lists)"
        ))),
        "PREFERRED" | "REQUIRED" | "VERIFY_IDENTITY" => with_tls(url, mode, &files, code, &shown),
        other => Err(LockError::Config(format!(
            "`ssl-mode={other}` in {shown}: expected `DISABLED`, `PREFERRED` (the default), \
             `REQUIRED` or `VERIFY_IDENTITY` (MySQL's meanings)"
        ))),
    }
}

#[cfg(feature = "tls")]
fn with_tls(
    url: String,
    mode: &str,
    files: &TlsFiles,
    code: Option<&crate::tls::TlsConfig>,
    shown: &str,
) -> Result<(String, Secure), LockError> {
    use mysql_async::{ClientIdentity, SslOpts};
    let tls = files.load(code, shown)?;
    // mysql_async builds rustls' settings with the process's default provider.
    crate::tls::ensure_default_provider();
    let mut ssl = SslOpts::default();
    if let Some(ca) = tls.ca_pem {
        ssl = ssl
            .with_root_certs(vec![ca.into()])
            .with_disable_built_in_roots(true);
    }
    if let (Some(cert), Some(key)) = (tls.cert_pem, tls.key_pem) {
        ssl = ssl.with_client_identity(Some(ClientIdentity::new(cert.into(), key.into())));
    }
    let secure = match mode {
        "VERIFY_IDENTITY" => Secure::Tls(ssl),
        "REQUIRED" => Secure::Tls(ssl.with_danger_accept_invalid_certs(true)),
        _ => Secure::Preferred(ssl.with_danger_accept_invalid_certs(true)),
    };
    Ok((url, secure))
}

#[cfg(not(feature = "tls"))]
fn with_tls(
    _url: String,
    mode: &str,
    _files: &TlsFiles,
    _code: Option<&crate::tls::TlsConfig>,
    shown: &str,
) -> Result<(String, Secure), LockError> {
    Err(LockError::Config(format!(
        "{shown} asks for TLS (`ssl-mode={mode}`, or TLS files), which needs distlock's `tls` \
         feature: distlock = {{ version = \"…\", features = [\"tls\"] }}; or connect with \
         `ssl-mode=DISABLED`"
    )))
}

/// Whether `error` says the server offers no TLS (what `PREFERRED` falls back from).
#[cfg(feature = "tls")]
pub(super) fn offers_no_tls(error: &mysql_async::Error) -> bool {
    matches!(
        error,
        mysql_async::Error::Driver(mysql_async::DriverError::NoClientSslFlagFromServer)
    )
}

#[cfg(all(test, feature = "tls"))]
mod tests {
    use super::{Secure, secure};

    #[test]
    fn ssl_mode_and_files_leave_the_driver_url() {
        let (url, how) = secure("mysql://u:pw@h/db?ssl-mode=required&pool_min=1", None).unwrap();
        assert_eq!(url, "mysql://u:pw@h/db?pool_min=1");
        assert!(matches!(how, Secure::Tls(_)), "{how:?}");
        let (_, how) = secure("mysql://u:pw@h/db", None).unwrap();
        assert!(matches!(how, Secure::Preferred(_)), "{how:?}");
        let (_, how) = secure("mysql://u:pw@h/db?ssl-mode=DISABLED", None).unwrap();
        assert!(matches!(how, Secure::Plain), "{how:?}");
    }

    #[test]
    fn modes_the_driver_cannot_keep_are_refused_with_the_way_out() {
        for (url, says) in [
            ("mysql://u:pw@h/db?ssl-mode=VERIFY_CA", "VERIFY_IDENTITY"),
            (
                "mysql://u:pw@h/db?ssl-mode=REQUIRED&ssl-ca=/x",
                "VERIFY_IDENTITY",
            ),
            (
                "mysql://u:pw@h/db?ssl-mode=sometimes",
                "expected `DISABLED`",
            ),
            (
                "mysql://u:pw@h/db?ssl-mode=DISABLED&ssl-cert=/x",
                "drop one",
            ),
        ] {
            let error = secure(url, None).unwrap_err().to_string();
            assert!(error.contains(says), "{url}: {error}");
            assert!(!error.contains(":pw@"), "{error}");
        }
    }
}
