//! A PostgreSQL server of the tests' own: `initdb` into a scratch directory, `postgres` on a
//! free loopback port. PostgreSQL refuses to run as root, so when the tests run as root both
//! run as `nobody`, which owns the scratch directory.
//!
//! TCP connections need the password ([`PASSWORD`], scram-sha-256), so tests can show what a
//! wrong one does; the data survives [`PostgresServer::restart`] and
//! [`kill`](PostgresServer::kill) (a crash: PostgreSQL recovers from its WAL).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::unprivileged::{as_server_user, chown_to_server_user, remove_at_exit};
use super::{TEST_COMMAND, free_port, output_tied, spawn_tied, unique};

/// The superuser's password on every test server.
pub const PASSWORD: &str = "distlock-test";

pub struct PostgresServer {
    port: u16,
    /// The scratch directory: `data/` inside, the socket and the log beside it.
    dir: PathBuf,
    child: Option<Child>,
    /// Extra `postgres` arguments (`["-c", "log_statement=all"]`).
    extra: Vec<String>,
    /// Remove the directory when dropped (not for the shared server, see [`shared`](Self::shared)).
    owned: bool,
    /// TLS only over TCP (`hostssl` lines alone); the test's own connections use the socket.
    tls: bool,
    /// Another scratch directory to remove with the server (a TLS server's key and pg_hba).
    keep_dir: Option<PathBuf>,
    /// Environment of the server process (libfaketime's, for a clock off this host's).
    env: Vec<(String, String)>,
}

/// A PostgreSQL program: on `PATH`, or in Debian's `/usr/lib/postgresql/<version>/bin`
/// (newest version first), which is not on `PATH`.
fn binary(name: &str) -> PathBuf {
    if let Some(path) = std::env::var_os("PATH")
        && let Some(found) = std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    {
        return found;
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin").join(name)))
        })
        .filter(|(_, p)| p.is_file())
        .collect();
    versions.sort();
    match versions.pop() {
        Some((_, path)) => path,
        None => panic!(
            "`{name}` (PostgreSQL) is not installed. Run the README's test command, \
             `{TEST_COMMAND}`, which installs the `postgresql` package"
        ),
    }
}

impl PostgresServer {
    /// `initdb` and start a server of this test's own.
    pub fn start() -> PostgresServer {
        PostgresServer::start_with(&[])
    }

    /// A server as managed PostgreSQL offerings run it: TCP connections must use TLS (its
    /// `pg_hba.conf` has `hostssl` lines only) with the process's test certificates
    /// ([`certs::Certificates`](crate::certs::Certificates)); client certificates are checked
    /// when given. [`url`](Self::url) then asks for `sslmode=verify-full` with the test CA.
    pub fn start_tls() -> PostgresServer {
        let certs = crate::certs::Certificates::shared();
        PostgresServer::start_tls_with(&certs.server_cert, &certs.server_key, "scram-sha-256")
    }

    /// [`start_tls`](Self::start_tls) with this server certificate and key, and this
    /// authentication on the `hostssl` line (`"scram-sha-256 clientcert=verify-ca"` wants a
    /// client certificate too).
    pub fn start_tls_with(
        cert: &std::path::Path,
        key: &std::path::Path,
        method: &str,
    ) -> PostgresServer {
        let certs = crate::certs::Certificates::shared();
        let dir = std::env::temp_dir().join(unique("distlock-pg-tls"));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        // The key must belong to the server's user and be private to it.
        std::fs::copy(key, dir.join("server.key")).expect("copy the server key");
        let hba = dir.join("pg_hba.conf");
        std::fs::write(
            &hba,
            format!("local all all trust\nhostssl all all 127.0.0.1/32 {method}\n"),
        )
        .expect("pg_hba.conf");
        chown_to_server_user(&dir);
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                dir.join("server.key"),
                std::fs::Permissions::from_mode(0o600),
            )
            .expect("chmod the server key");
        }
        let settings = [
            format!("hba_file={}", hba.display()),
            "ssl=on".to_owned(),
            format!("ssl_cert_file={}", cert.display()),
            format!("ssl_key_file={}", dir.join("server.key").display()),
            format!("ssl_ca_file={}", certs.ca.display()),
        ];
        let extra: Vec<&str> = settings.iter().flat_map(|s| ["-c", s.as_str()]).collect();
        let mut server = PostgresServer::start_with(&extra);
        server.tls = true;
        server.keep_dir = Some(dir);
        server
    }

    /// A server whose clock is `offset` off this host's (libfaketime's relative offset, `+5s`,
    /// preloaded into the server): what `distlock check` must notice.
    pub fn start_with_clock_off(offset: &str) -> PostgresServer {
        let library = std::fs::read_dir("/usr/lib")
            .into_iter()
            .flatten()
            .flatten()
            .map(|arch| arch.path().join("faketime/libfaketime.so.1"))
            .find(|library| library.exists())
            .unwrap_or_else(|| {
                panic!("libfaketime is not installed (Debian: libfaketime): run `{TEST_COMMAND}`, which installs it")
            });
        let env = vec![
            ("LD_PRELOAD".to_owned(), library.display().to_string()),
            ("FAKETIME".to_owned(), offset.to_owned()),
        ];
        PostgresServer::start_with_env(&[], env)
    }

    /// The same, with extra `postgres` arguments.
    pub fn start_with(extra: &[&str]) -> PostgresServer {
        PostgresServer::start_with_env(extra, Vec::new())
    }

    fn start_with_env(extra: &[&str], env: Vec<(String, String)>) -> PostgresServer {
        let dir = std::env::temp_dir().join(unique("distlock-pg"));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        let pwfile = dir.join("pwfile");
        std::fs::write(&pwfile, PASSWORD).expect("password file");
        chown_to_server_user(&dir);
        let mut initdb = Command::new(binary("initdb"));
        initdb
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-U", "postgres", "-E", "UTF8", "--no-sync", "--locale=C"])
            .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
            .arg(format!("--pwfile={}", pwfile.display()));
        as_server_user(&mut initdb);
        let out = output_tied(initdb).expect("initdb runs");
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut last_error = String::new();
        for _ in 0..5 {
            let mut server = PostgresServer {
                port: free_port(),
                dir: dir.clone(),
                child: None,
                extra: extra.iter().map(|a| a.to_string()).collect(),
                owned: true,
                tls: false,
                keep_dir: None,
                env: env.clone(),
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(error) => {
                    last_error = error;
                    server.owned = false; // the next try reuses the directory
                }
            }
        }
        panic!("could not start postgres: {last_error}");
    }

    /// One TLS-only server ([`start_tls`](Self::start_tls)) for all the tests of this binary
    /// (each test with a lock table of its own): the conformance suite's TLS cases, which never
    /// fault it. It dies with the process; its directory is removed at exit.
    pub fn shared_tls() -> &'static PostgresServer {
        static SHARED: std::sync::OnceLock<PostgresServer> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| {
            let mut server = PostgresServer::start_tls();
            server.owned = false;
            remove_at_exit(server.dir.clone());
            server
        })
    }

    /// One server for all the tests of this binary. No `Drop` reaches a static: the server
    /// dies with the process (parent-death signal), and the scratch directory is removed at
    /// exit.
    pub fn shared() -> &'static PostgresServer {
        static SHARED: std::sync::OnceLock<PostgresServer> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| {
            let mut server = PostgresServer::start();
            server.owned = false;
            remove_at_exit(server.dir.clone());
            server
        })
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log = std::fs::File::create(self.dir.join("log")).map_err(|e| e.to_string())?;
        let mut command = Command::new(binary("postgres"));
        command
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(&self.dir)
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "max_connections=300", "-c", "shared_buffers=32MB"])
            // Durability against a machine crash is not under test; a process crash (kill -9)
            // loses nothing with these, as the OS keeps the written pages. (Not
            // `synchronous_commit=off`: a commit answered before its WAL is written is lost by a
            // kill -9 of the server, as the fault suite's restart found.)
            .args(["-c", "fsync=off"])
            .args(["-c", "full_page_writes=off"])
            // Dynamic shared memory as files in the data directory, removed with it. The default
            // (POSIX shared memory, /dev/shm/PostgreSQL.*) outlives a server stopped by SIGKILL or
            // an immediate shutdown, as every test server is: 472 segments (270 MB of RAM) had
            // piled up in /dev/shm after two days of runs.
            .args(["-c", "dynamic_shared_memory_type=mmap"])
            .args(&self.extra)
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        as_server_user(&mut command);
        let child = spawn_tied(command).map_err(|e| format!("cannot run postgres: {e}"))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.is_ready() {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                self.child = None;
                let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
                return Err(format!(
                    "postgres did not start on port {}: {log}",
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the server accepts connections (its log says so and the port answers).
    fn is_ready(&self) -> bool {
        let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
        let ready_marks = log.matches("ready to accept connections").count();
        let starts = log.matches("starting PostgreSQL").count().max(1);
        ready_marks >= starts && std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
    }

    /// The scratch directory (`data/` inside), removed when the server is dropped.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's log so far (statements too, with `log_statement=all`).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// The server's process id (the postmaster).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is running").id()
    }

    /// `postgres://postgres:<password>@127.0.0.1:<port>/postgres`
    pub fn url(&self) -> String {
        self.url_for("postgres")
    }

    /// The URL of database `db` on this server (for a TLS server, with `sslmode=verify-full`
    /// and the test CA).
    pub fn url_for(&self, db: &str) -> String {
        let url = format!(
            "postgres://postgres:{PASSWORD}@127.0.0.1:{}/{db}",
            self.port
        );
        match self.tls {
            false => url,
            true => format!(
                "{url}?sslmode=verify-full&sslrootcert={}",
                crate::certs::Certificates::shared().ca.display()
            ),
        }
    }

    /// A lock URL with a lock table of its own (`?table=`), so tests sharing a server never
    /// see each other's locks.
    pub fn url_with_own_table(&self) -> String {
        let table = unique("locks").replace('-', "_");
        let url = self.url();
        let join = if url.contains('?') { '&' } else { '?' };
        format!("{url}{join}table={table}")
    }

    /// A plain client of the server's `postgres` database (the connection runs on a task of
    /// the caller's runtime).
    pub async fn client(&self) -> tokio_postgres::Client {
        // Through the Unix socket: plain, whatever TCP demands.
        let config = format!(
            "host={} port={} user=postgres dbname=postgres",
            self.dir.display(),
            self.port
        );
        let (client, connection) = tokio_postgres::connect(&config, tokio_postgres::NoTls)
            .await
            .expect("connect to the test postgres");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
    }

    /// Kills the server (SIGKILL to the postmaster and its backends: a crash). The data stays.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // The backends notice the postmaster's death by themselves, but not at once: kill
            // them too (found before they are re-parented), so the port and the shared memory
            // are free for a restart.
            let backends = children_of(child.id() as libc::pid_t);
            let _ = child.kill();
            for pid in backends {
                // SAFETY: signalling a process by pid.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            let _ = child.wait();
        }
    }

    /// Stops the postmaster and its backends (SIGSTOP): connections stay open, nothing is
    /// answered, like a hung host.
    pub fn pause(&self) {
        self.signal_all(libc::SIGSTOP);
    }

    /// Lets a paused server run again (SIGCONT).
    pub fn resume(&self) {
        self.signal_all(libc::SIGCONT);
    }

    fn signal_all(&self, signal: libc::c_int) {
        let postmaster = self.pid();
        super::signal(postmaster, signal);
        for pid in children_of(postmaster as libc::pid_t) {
            // SAFETY: signalling a backend of our own server by pid (it may have just exited).
            unsafe { libc::kill(pid, signal) };
        }
    }

    /// Stops the server cleanly ("fast" shutdown: SIGINT) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
            let _ = child.wait();
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Starts the stopped or killed server again on the same port, with its data.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop or kill the server first");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(error) if Instant::now() > deadline => panic!("restart failed: {error}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Immediate shutdown (SIGQUIT): the data is thrown away with the directory anyway.
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGQUIT) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        if self.owned {
            super::unprivileged::kill_processes_in(&self.dir);
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        if let Some(dir) = &self.keep_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The processes whose parent is `parent` (a postmaster's backends).
fn children_of(parent: libc::pid_t) -> Vec<libc::pid_t> {
    let mut children = Vec::new();
    for (pid, dir) in super::unprivileged::processes() {
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        // `pid (comm) state ppid …`; comm may hold spaces, so split after the last `)`.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(parent) {
            children.push(pid);
        }
    }
    children
}
