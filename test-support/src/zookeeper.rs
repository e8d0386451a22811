//! ZooKeeper servers of the tests' own (Debian's `zookeeper` package, Java): a standalone
//! server, or a three-server ensemble, on free loopback ports in scratch directories.
//!
//! The servers tick every 100 ms and accept sessions from 200 ms up to 8 days (the longest
//! lease distlock accepts is 7 days), so a lock's lease is its session timeout in the tests
//! as it would be with a production server configured for the leases in use. Container nodes
//! are checked every 200 ms (ZooKeeper's default: every minute), so tests can see an empty
//! lock parent go.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::unprivileged::remove_at_exit;
use super::{ServerChild, TEST_COMMAND, free_port, poll_for, unique};

/// Where Debian's package puts the server's jar.
const JAR: &str = "/usr/share/java/zookeeper.jar";

fn java() -> PathBuf {
    let java = PathBuf::from("/usr/bin/java");
    assert!(
        java.is_file() && Path::new(JAR).is_file(),
        "ZooKeeper is not installed ({JAR} or {} is missing). Run the README's test command, \
         `{TEST_COMMAND}`, which installs the `zookeeper` package",
        java.display()
    );
    java
}

/// One ZooKeeper server process: standalone, or a member of an ensemble.
pub struct ZkServer {
    pub client_port: u16,
    /// TLS servers: the secure client port (Netty, the test certificates); the plain
    /// `client_port` stays for the harness's own look at what the server holds.
    pub secure_port: Option<u16>,
    dir: PathBuf,
    child: ServerChild,
    owned: bool,
}

impl std::ops::Deref for ZkServer {
    type Target = ServerChild;

    /// `pid`, `is_running`, `pause`, `resume`, `kill` (a crash: the data stays).
    fn deref(&self) -> &ServerChild {
        &self.child
    }
}

impl std::ops::DerefMut for ZkServer {
    fn deref_mut(&mut self) -> &mut ServerChild {
        &mut self.child
    }
}

impl ZkServer {
    /// A standalone server of this test's own.
    pub fn start() -> ZkServer {
        ZkServer::start_with(None, "")
    }

    /// A server of this test's own with these `zoo.cfg` lines after the usual ones (a later
    /// line wins: `maxSessionTimeout=3000\n`).
    pub fn start_configured(lines: &str) -> ZkServer {
        ZkServer::start_with(None, lines)
    }

    /// A server whose clients connect over TLS (`zks://`, [`url`](Self::url) names the test CA),
    /// with the process's test certificates; client certificates are checked when given
    /// (`ssl.clientAuth=want`).
    pub fn start_tls() -> ZkServer {
        let certs = crate::certs::Certificates::shared();
        ZkServer::start_tls_with(&certs.server_cert, &certs.server_key, "want")
    }

    /// [`start_tls`](Self::start_tls) with this certificate and key, and `client_auth` (`need`:
    /// a client certificate is required).
    pub fn start_tls_with(cert: &Path, key: &Path, client_auth: &str) -> ZkServer {
        ZkServer::start_with(Some((cert, key, client_auth)), "")
    }

    fn start_with(tls: Option<(&Path, &Path, &str)>, lines: &str) -> ZkServer {
        let mut last = String::new();
        for _ in 0..5 {
            let dir = std::env::temp_dir().join(unique("distlock-zk"));
            let port = free_port();
            write_config(&dir, port, None);
            if !lines.is_empty() {
                use std::io::Write;
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(dir.join("zoo.cfg"))
                    .and_then(|mut config| config.write_all(lines.as_bytes()))
                    .expect("zoo.cfg");
            }
            let secure_port = tls.map(|(cert, key, client_auth)| {
                let secure = free_port();
                // ZooKeeper reads its key and certificate from one PEM file (a PKCS#8 key).
                let mut keystore = std::fs::read(key).expect("the server key");
                keystore.extend(std::fs::read(cert).expect("the server certificate"));
                std::fs::write(dir.join("keystore.pem"), keystore).expect("keystore.pem");
                let mut config = std::fs::OpenOptions::new()
                    .append(true)
                    .open(dir.join("zoo.cfg"))
                    .expect("zoo.cfg");
                use std::io::Write;
                write!(
                    config,
                    "secureClientPort={secure}\n\
                     secureClientPortAddress=127.0.0.1\n\
                     serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                     ssl.keyStore.location={}\n\
                     ssl.trustStore.location={}\n\
                     ssl.clientAuth={client_auth}\n",
                    dir.join("keystore.pem").display(),
                    crate::certs::Certificates::shared().ca.display()
                )
                .expect("zoo.cfg");
                secure
            });
            let mut server = ZkServer {
                client_port: port,
                secure_port,
                dir,
                child: ServerChild::default(),
                owned: true,
            };
            match server
                .spawn()
                .and_then(|()| server.wait_serving(Duration::from_secs(60)))
            {
                Ok(()) => return server,
                Err(error) => last = error,
            }
        }
        panic!("could not start a ZooKeeper server: {last}");
    }

    /// One TLS server ([`start_tls`](Self::start_tls)) for all the tests of this binary (each
    /// test uses a chroot of its own): the conformance suite's TLS cases, which never fault
    /// it. It dies with the process; its directory is removed at exit.
    pub fn shared_tls() -> &'static ZkServer {
        static SHARED: std::sync::OnceLock<ZkServer> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| {
            let mut server = ZkServer::start_tls();
            server.owned = false;
            remove_at_exit(server.dir.clone());
            server
        })
    }

    /// One standalone server for all the tests of this binary (each test uses a chroot of
    /// its own). It dies with the process; its directory is removed at exit.
    pub fn shared() -> &'static ZkServer {
        static SHARED: std::sync::OnceLock<ZkServer> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| {
            let mut server = ZkServer::start();
            server.owned = false;
            remove_at_exit(server.dir.clone());
            server
        })
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log = std::fs::File::create(self.dir.join("log")).map_err(|e| e.to_string())?;
        let mut command = Command::new(java());
        command
            .args([
                "-Xmx192m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-Xshare:auto",
            ])
            .arg(format!("-Dzookeeper.log.dir={}", self.dir.display()))
            .arg("-Dznode.container.checkIntervalMs=200")
            .arg("-Dzookeeper.admin.enableServer=false")
            // Netty's codec is off the jar's own class path, and the secure port needs it.
            .args([
                "-cp",
                &format!("{JAR}:/usr/share/java/netty-codec.jar"),
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            ])
            .arg(self.dir.join("zoo.cfg"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        self.child.spawn(command, "java")
    }

    /// Waits until the server serves clients (`srvr` reports a mode), or fails with its log.
    fn wait_serving(&mut self, within: Duration) -> Result<(), String> {
        let port = self.client_port;
        self.child
            .wait_ready(within, || mode(port).is_some())
            .map_err(|()| {
                let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
                format!("ZooKeeper did not serve on port {port}: {log}")
            })
    }

    /// `standalone`, `leader` or `follower` while the server serves clients.
    pub fn mode(&self) -> Option<String> {
        mode(self.client_port)
    }

    /// `zk://127.0.0.1:<port><chroot>`, or for a TLS server
    /// `zks://127.0.0.1:<secure port><chroot>?cacert=<test CA>`.
    pub fn url(&self, chroot: &str) -> String {
        match self.secure_port {
            None => format!("zk://127.0.0.1:{}{chroot}", self.client_port),
            Some(secure) => format!(
                "zks://127.0.0.1:{secure}{chroot}?cacert={}",
                crate::certs::Certificates::shared().ca.display()
            ),
        }
    }

    /// Starts the killed server again, with its data.
    pub fn restart(&mut self) {
        self.spawn().expect("restart ZooKeeper");
    }
}

/// The mode of the server on `port` (`srvr`), while it serves clients.
fn mode(port: u16) -> Option<String> {
    let reply = four_letter(port, "srvr")?;
    reply
        .lines()
        .find_map(|line| line.strip_prefix("Mode: "))
        .map(|mode| mode.trim().to_owned())
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        self.child.kill();
        if self.owned {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Writes `zoo.cfg` (and `myid` for an ensemble member) into `dir`.
fn write_config(dir: &Path, client_port: u16, ensemble: Option<(usize, &[(u16, u16)])>) {
    std::fs::create_dir_all(dir.join("data")).expect("scratch directory");
    let mut config = format!(
        "tickTime=100\n\
         minSessionTimeout=200\n\
         maxSessionTimeout=700000000\n\
         dataDir={}\n\
         clientPort={client_port}\n\
         clientPortAddress=127.0.0.1\n\
         admin.enableServer=false\n\
         4lw.commands.whitelist=*\n\
         forceSync=no\n",
        dir.join("data").display()
    );
    if let Some((id, peers)) = ensemble {
        config.push_str("initLimit=100\nsyncLimit=30\n");
        for (i, (quorum, election)) in peers.iter().enumerate() {
            config.push_str(&format!("server.{}=127.0.0.1:{quorum}:{election}\n", i + 1));
        }
        std::fs::write(dir.join("data").join("myid"), format!("{id}\n")).expect("myid");
    }
    std::fs::write(dir.join("zoo.cfg"), config).expect("zoo.cfg");
}

/// Sends a four-letter command and returns the reply.
pub fn four_letter(port: u16, command: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    )
    .ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(command.as_bytes()).ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    Some(reply)
}

/// A three-server ensemble.
pub struct ZkEnsemble {
    pub servers: Vec<ZkServer>,
    dir: PathBuf,
}

impl ZkEnsemble {
    pub fn start() -> ZkEnsemble {
        let dir = std::env::temp_dir().join(unique("distlock-zk-ensemble"));
        let peers: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let mut servers = Vec::new();
        for id in 1..=3 {
            let member = dir.join(format!("s{id}"));
            let port = free_port();
            write_config(&member, port, Some((id, &peers)));
            let mut server = ZkServer {
                client_port: port,
                secure_port: None,
                dir: member,
                child: ServerChild::default(),
                owned: false,
            };
            server.spawn().expect("start an ensemble member");
            servers.push(server);
        }
        let mut ensemble = ZkEnsemble { servers, dir };
        for server in &mut ensemble.servers {
            server
                .wait_serving(Duration::from_secs(90))
                .unwrap_or_else(|e| panic!("the ensemble did not form: {e}"));
        }
        ensemble
    }

    /// `zk://127.0.0.1:a,127.0.0.1:b,127.0.0.1:c<chroot>`
    pub fn url(&self, chroot: &str) -> String {
        let hosts: Vec<String> = self
            .servers
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.client_port))
            .collect();
        format!("zk://{}{chroot}", hosts.join(","))
    }

    /// The index of the current leader, waiting up to `within` for one.
    pub fn leader(&self, within: Duration) -> Option<usize> {
        poll_for(within, || {
            self.servers
                .iter()
                .position(|s| s.is_running() && s.mode().as_deref() == Some("leader"))
        })
    }
}

impl Drop for ZkEnsemble {
    fn drop(&mut self) {
        for server in &mut self.servers {
            server.child.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A plain ZooKeeper client of the server at `port` (for looking at and tampering with what
/// it holds, as a human would with `zkCli.sh`).
pub async fn client(port: u16) -> zookeeper_client::Client {
    zookeeper_client::Client::connector()
        .with_session_timeout(Duration::from_secs(30))
        .connect(&format!("127.0.0.1:{port}"))
        .await
        .expect("connect to the test ZooKeeper")
}
