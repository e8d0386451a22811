//! etcd members of the tests' own (Debian's `etcd-server` package): a single-member cluster,
//! or three members, on free loopback ports with their data in scratch directories (under
//! `/dev/shm` when there is one: etcd fsyncs every write, and the tests measure locks, not
//! disks).
//!
//! The members heartbeat every 50 ms and elect a new leader after 500 ms of silence (etcd's
//! defaults: 100 ms and 1 s), which lets etcd grant leases of 1 s, the shortest its TTL unit
//! allows (its minimum TTL is 1.5 election timeouts, rounded up to a second).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::unprivileged::remove_at_exit;
use super::{ServerChild, TEST_COMMAND, free_port, poll_for, unique};

const ETCD: &str = "/usr/bin/etcd";

fn etcd() -> &'static str {
    assert!(
        Path::new(ETCD).is_file(),
        "etcd is not installed ({ETCD} is missing). Run the README's test command, \
         `{TEST_COMMAND}`, which installs the `etcd-server` package"
    );
    ETCD
}

fn scratch(label: &str) -> PathBuf {
    let base = Path::new("/dev/shm");
    let base = if base.is_dir() {
        base.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    base.join(unique(label))
}

/// One etcd member process.
pub struct EtcdMember {
    pub name: String,
    /// Plain HTTP/2: the harness's own look at what the member holds (and the clients under
    /// test of a member without TLS).
    pub client_port: u16,
    /// TLS members: the port clients under test use (`etcds://`).
    pub tls_port: Option<u16>,
    /// TLS members: whether clients must present a certificate the test CA signed.
    mutual: bool,
    pub peer_port: u16,
    dir: PathBuf,
    /// `name=http://…` for every member of its cluster.
    initial_cluster: String,
    /// More `etcd` arguments.
    extra: Vec<String>,
    child: ServerChild,
    owned: bool,
}

impl std::ops::Deref for EtcdMember {
    type Target = ServerChild;

    /// `pid`, `is_running`, `pause`, `resume`, `kill` (a crash: the data stays).
    fn deref(&self) -> &ServerChild {
        &self.child
    }
}

impl std::ops::DerefMut for EtcdMember {
    fn deref_mut(&mut self) -> &mut ServerChild {
        &mut self.child
    }
}

impl EtcdMember {
    /// A single-member cluster of this test's own.
    pub fn start() -> EtcdMember {
        EtcdMember::start_with(None, &[])
    }

    /// A member that serves clients over TLS on [`tls_port`](Self::tls_port) with the process's
    /// test certificates (its plain port is the harness's own); `mutual`: clients must present a
    /// certificate the test CA signed. `extra`: more `etcd` arguments.
    pub fn start_tls(mutual: bool, extra: &[&str]) -> EtcdMember {
        EtcdMember::start_with(Some(mutual), extra)
    }

    fn start_with(tls: Option<bool>, extra: &[&str]) -> EtcdMember {
        let mut last = String::new();
        for _ in 0..5 {
            let peer_port = free_port();
            let mut member = EtcdMember {
                name: "solo".into(),
                client_port: free_port(),
                tls_port: tls.map(|_| free_port()),
                mutual: tls == Some(true),
                extra: extra.iter().map(|a| a.to_string()).collect(),
                peer_port,
                dir: scratch("distlock-etcd"),
                initial_cluster: format!("solo=http://127.0.0.1:{peer_port}"),
                child: ServerChild::default(),
                owned: true,
            };
            match member
                .spawn()
                .and_then(|()| member.wait_healthy(Duration::from_secs(60)))
            {
                Ok(()) => return member,
                Err(error) => last = error,
            }
        }
        panic!("could not start etcd: {last}");
    }

    /// One member served over mutual TLS ([`start_tls`](Self::start_tls)) for all the tests of
    /// this binary (each test uses a key prefix of its own): the conformance suite's TLS cases,
    /// which never fault it. It dies with the process; its directory is removed at exit.
    pub fn shared_tls() -> &'static EtcdMember {
        static SHARED: std::sync::OnceLock<EtcdMember> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| {
            let mut member = EtcdMember::start_tls(true, &[]);
            member.owned = false;
            remove_at_exit(member.dir.clone());
            member
        })
    }

    /// One single-member cluster for all the tests of this binary (each test uses a key
    /// prefix of its own). It dies with the process; its directory is removed at exit.
    pub fn shared() -> &'static EtcdMember {
        static SHARED: std::sync::OnceLock<EtcdMember> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| {
            let mut member = EtcdMember::start();
            member.owned = false;
            remove_at_exit(member.dir.clone());
            member
        })
    }

    fn spawn(&mut self) -> Result<(), String> {
        std::fs::create_dir_all(&self.dir).map_err(|e| e.to_string())?;
        let log = std::fs::File::create(self.dir.join("log")).map_err(|e| e.to_string())?;
        let mut client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut command = Command::new(etcd());
        if let Some(tls_port) = self.tls_port {
            let certs = crate::certs::Certificates::shared();
            client = format!("https://127.0.0.1:{tls_port},{client}");
            command.arg("--cert-file").arg(&certs.server_cert);
            command.arg("--key-file").arg(&certs.server_key);
            if self.mutual {
                command.arg("--trusted-ca-file").arg(&certs.ca);
                command.arg("--client-cert-auth");
            }
        }
        command
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &self.initial_cluster])
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args(["--logger", "zap", "--log-level", "warn"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        self.child.spawn(command, "etcd")
    }

    /// Waits until the member answers `/health` with a leader, or fails with its log.
    fn wait_healthy(&mut self, within: Duration) -> Result<(), String> {
        let port = self.client_port;
        self.child
            .wait_ready(within, || healthy(port))
            .map_err(|()| {
                let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
                format!("etcd did not become healthy on port {port}: {log}")
            })
    }

    /// Whether the member serves and has a leader (`GET /health`).
    pub fn healthy(&self) -> bool {
        healthy(self.client_port)
    }

    /// Whether this member is its cluster's leader (`/v3/maintenance/status`).
    pub fn is_leader(&self) -> bool {
        let Some(reply) = http_call(self.client_port, "POST", "/v3/maintenance/status", "{}")
        else {
            return false;
        };
        let field = |name: &str| {
            let at = reply.find(&format!("\"{name}\":\""))? + name.len() + 4;
            Some(reply[at..].split('"').next()?.to_owned())
        };
        field("leader").is_some() && field("leader") == field("member_id")
    }

    /// `etcd://127.0.0.1:<port>/<prefix>`, or for a TLS member
    /// `etcds://127.0.0.1:<TLS port>/<prefix>?cacert=<test CA>` (with the test client
    /// certificate when the member wants one).
    pub fn url(&self, prefix: &str) -> String {
        let Some(tls_port) = self.tls_port else {
            return format!("etcd://127.0.0.1:{}/{prefix}", self.client_port);
        };
        let certs = crate::certs::Certificates::shared();
        let mut url = format!(
            "etcds://127.0.0.1:{tls_port}/{prefix}?cacert={}",
            certs.ca.display()
        );
        if self.mutual {
            url.push('&');
            url.push_str(&certs.client_params("cert", "key"));
        }
        url
    }

    /// Turns etcd's authentication on (through the plain port's JSON gateway): a `root` user
    /// and the user `name` with `password`, both in the `root` role. From then on every call
    /// needs a token.
    pub fn enable_auth(&self, name: &str, password: &str) {
        self.enable_auth_granting(name, password, None);
    }

    /// As [`Self::enable_auth`], but `name`'s one role (`<name>-role`) grants readwrite over
    /// the keys under `prefix` alone when `prefix` is given (`etcdctl role grant-permission
    /// ROLE readwrite --prefix=true PREFIX`).
    pub fn enable_auth_granting(&self, name: &str, password: &str, prefix: Option<&str>) {
        use crate::store::etcd::base64;
        let call = |path: &str, body: String| {
            let reply = http_call(self.client_port, "POST", path, &body)
                .unwrap_or_else(|| panic!("etcd {path}: no answer"));
            assert!(!reply.contains("\"error\""), "etcd {path}: {reply}");
        };
        call(
            "/v3/auth/user/add",
            r#"{"name":"root","password":"root-pw"}"#.to_owned(),
        );
        call(
            "/v3/auth/user/grant",
            r#"{"user":"root","role":"root"}"#.to_owned(),
        );
        call(
            "/v3/auth/user/add",
            format!(r#"{{"name":"{name}","password":"{password}"}}"#),
        );
        let role = match prefix {
            None => "root".to_owned(),
            Some(prefix) => {
                let role = format!("{name}-role");
                call("/v3/auth/role/add", format!(r#"{{"name":"{role}"}}"#));
                // The prefix's end: its last byte plus one (an ASCII prefix).
                let mut end = prefix.as_bytes().to_vec();
                *end.last_mut().expect("a prefix") += 1;
                let end = String::from_utf8(end).expect("an ASCII prefix");
                call(
                    "/v3/auth/role/grant",
                    format!(
                        r#"{{"name":"{role}","perm":{{"permType":"READWRITE","key":"{}","range_end":"{}"}}}}"#,
                        base64(prefix),
                        base64(&end)
                    ),
                );
                role
            }
        };
        call(
            "/v3/auth/user/grant",
            format!(r#"{{"user":"{name}","role":"{role}"}}"#),
        );
        call("/v3/auth/enable", "{}".to_owned());
    }

    /// Starts the killed member again, with its data.
    pub fn restart(&mut self) {
        self.spawn().expect("restart etcd");
        // Listening before this returns: a scenario asks the restarted member at once, and on a
        // loaded machine etcd took long enough to open its port that the question was refused
        // (seen in a fresh clone's run). Not `/health`: a member restarted while a majority of
        // its cluster is down has no leader, and serves (or refuses) as it will.
        let port = self.client_port;
        let listening = || {
            std::net::TcpStream::connect_timeout(
                &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
                Duration::from_millis(500),
            )
            .is_ok()
        };
        if self
            .child
            .wait_ready(Duration::from_secs(30), listening)
            .is_err()
        {
            let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
            panic!("restarted etcd did not listen on port {port} within 30 s: {log}");
        }
    }
}

/// Whether the member on `port` serves and has a leader (`GET /health`).
fn healthy(port: u16) -> bool {
    http_call(port, "GET", "/health", "").is_some_and(|reply| reply.contains("\"health\":\"true\""))
}

impl Drop for EtcdMember {
    fn drop(&mut self) {
        self.child.kill();
        if self.owned {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A plain HTTP/1.0 call (so the reply is never chunked) to etcd's JSON gateway; the reply's body.
pub fn http_call(port: u16, method: &str, path: &str, body: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    )
    .ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    reply
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
}

/// A three-member cluster.
pub struct EtcdCluster {
    pub members: Vec<EtcdMember>,
    dir: PathBuf,
}

impl EtcdCluster {
    pub fn start() -> EtcdCluster {
        let dir = scratch("distlock-etcd-cluster");
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let initial_cluster: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect();
        let mut members = Vec::new();
        for (i, &(client_port, peer_port)) in ports.iter().enumerate() {
            let mut member = EtcdMember {
                name: format!("m{i}"),
                client_port,
                tls_port: None,
                mutual: false,
                extra: Vec::new(),
                peer_port,
                dir: dir.join(format!("m{i}")),
                initial_cluster: initial_cluster.join(","),
                child: ServerChild::default(),
                owned: false,
            };
            member.spawn().expect("start a cluster member");
            members.push(member);
        }
        let mut cluster = EtcdCluster { members, dir };
        for member in &mut cluster.members {
            member
                .wait_healthy(Duration::from_secs(90))
                .unwrap_or_else(|e| panic!("the cluster did not form: {e}"));
        }
        cluster
    }

    /// `etcd://127.0.0.1:a,127.0.0.1:b,127.0.0.1:c/<prefix>`
    pub fn url(&self, prefix: &str) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect();
        format!("etcd://{}/{prefix}", hosts.join(","))
    }

    /// The index of the current leader, waiting up to `within` for one.
    pub fn leader(&self, within: Duration) -> Option<usize> {
        poll_for(within, || {
            self.members
                .iter()
                .position(|m| m.is_running() && m.is_leader())
        })
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            member.child.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
