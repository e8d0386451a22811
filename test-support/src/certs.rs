//! Certificates for the TLS tests, made once per test process with the `openssl` command: a CA,
//! a server certificate it signs for `127.0.0.1` and `localhost`, a client certificate it
//! signs (common name `distlock`, for mutual TLS), a server certificate for another name, and a
//! second CA nobody's server uses (to be trusted instead of the right one). ECDSA P-256 keys in
//! PKCS#8 PEM, which every server here and rustls read.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::TEST_COMMAND;

/// The files, in a directory of this process's own.
#[derive(Debug)]
pub struct Certificates {
    pub dir: PathBuf,
    /// The CA that signed every certificate below.
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// A server certificate for `example.invalid` only, signed by the same CA.
    pub other_name_cert: PathBuf,
    pub other_name_key: PathBuf,
    /// A CA that signed none of these: trusting it instead of [`ca`](Self::ca) must fail.
    pub other_ca: PathBuf,
}

impl Certificates {
    /// The process's certificates, made on first use.
    pub fn shared() -> &'static Certificates {
        static MADE: OnceLock<Certificates> = OnceLock::new();
        MADE.get_or_init(Certificates::make)
    }

    /// The client certificate and key given in code (`LockClientBuilder::tls`).
    pub fn client_identity(&self) -> distlock::TlsConfig {
        let read = |path: &Path| std::fs::read(path).expect("a test certificate file");
        distlock::TlsConfig::new().client_identity(read(&self.client_cert), read(&self.client_key))
    }

    /// The client certificate and key as URL parameters under the store's names, e.g.
    /// `cert=…&key=…` for `("cert", "key")`.
    pub fn client_params(&self, cert: &str, key: &str) -> String {
        format!(
            "{cert}={}&{key}={}",
            self.client_cert.display(),
            self.client_key.display()
        )
    }

    fn make() -> Certificates {
        let dir = std::env::temp_dir().join(crate::unique("distlock-certs"));
        std::fs::create_dir_all(&dir).expect("a directory for the test certificates");
        let file = |name: &str| dir.join(name);
        let certs = Certificates {
            ca: file("ca.pem"),
            server_cert: file("server.pem"),
            server_key: file("server.key"),
            client_cert: file("client.pem"),
            client_key: file("client.key"),
            other_name_cert: file("other-name.pem"),
            other_name_key: file("other-name.key"),
            other_ca: file("other-ca.pem"),
            dir: dir.clone(),
        };
        for ca in ["ca", "other-ca"] {
            key(&file(&format!("{ca}.key")));
            openssl(&[
                "req",
                "-x509",
                "-new",
                "-sha256",
                "-days",
                "3",
                "-subj",
                &format!("/CN=distlock test {ca}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
                "-key",
                path(&file(&format!("{ca}.key"))),
                "-out",
                path(&file(&format!("{ca}.pem"))),
            ]);
        }
        sign(
            &certs,
            "server",
            "localhost",
            "IP:127.0.0.1,DNS:localhost",
            "serverAuth,clientAuth",
        );
        sign(&certs, "client", "distlock", "DNS:distlock", "clientAuth");
        sign(
            &certs,
            "other-name",
            "example.invalid",
            "DNS:example.invalid",
            "serverAuth",
        );
        // Servers read their keys as another user (PostgreSQL, MariaDB run unprivileged) and
        // PostgreSQL wants its key private to that user: made readable here, copied where needed.
        for entry in std::fs::read_dir(&dir).expect("the certificate directory") {
            let entry = entry.expect("a certificate file");
            set_mode(&entry.path(), 0o644);
        }
        set_mode(&dir, 0o755);
        certs
    }
}

/// A fresh ECDSA P-256 key in PKCS#8 PEM.
fn key(out: &Path) {
    openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        path(out),
    ]);
}

/// `<name>.pem` and `<name>.key`: a certificate for `cn` with `san`, signed by the CA.
fn sign(certs: &Certificates, name: &str, cn: &str, san: &str, usage: &str) {
    let file = |suffix: &str| certs.dir.join(format!("{name}{suffix}"));
    key(&file(".key"));
    openssl(&[
        "req",
        "-new",
        "-subj",
        &format!("/CN={cn}"),
        "-key",
        path(&file(".key")),
        "-out",
        path(&file(".csr")),
    ]);
    let extensions = file(".ext");
    std::fs::write(
        &extensions,
        format!(
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyAgreement\n\
             extendedKeyUsage={usage}\nsubjectAltName={san}\n"
        ),
    )
    .expect("an extensions file");
    openssl(&[
        "x509",
        "-req",
        "-sha256",
        "-days",
        "3",
        "-in",
        path(&file(".csr")),
        "-CA",
        path(&certs.ca),
        "-CAkey",
        path(&certs.dir.join("ca.key")),
        "-CAcreateserial",
        "-extfile",
        path(&extensions),
        "-out",
        path(&file(".pem")),
    ]);
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temporary directory")
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
}

fn openssl(args: &[&str]) {
    match Command::new("openssl")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
    {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "openssl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(error) => panic!(
            "openssl is not installed ({error}). Run the README's test command, \
             `{TEST_COMMAND}`, which installs it"
        ),
    }
}
