//! PgBouncer of the tests' own, in front of a test [`PostgresServer`]: transaction pooling (a
//! client's statements reach whichever server connection is free at each transaction), on a
//! free loopback port, as Debian's `pgbouncer` package (1.18: no prepared statements in
//! transaction mode) runs it. PgBouncer refuses to run as root, so when the tests run as root
//! it runs as the same unprivileged user as PostgreSQL.
//!
//! Clients log in with the test password ([`PASSWORD`], scram-sha-256); PgBouncer logs in to
//! the server with it. It ignores the `options` startup parameter (as pools that serve
//! libraries sending it are set up): whatever a client asks that way never reaches the server.
//! The user is also a `stats_users` one: while tests run, its admin console (database
//! `pgbouncer`) answers `SHOW POOLS`, how many clients wait for a server connection and how long
//! the oldest has waited.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::postgres::{PASSWORD, PostgresServer};
use super::unprivileged::{as_server_user, chown_to_server_user, kill_processes_in};
use super::{ServerChild, TEST_COMMAND, free_port, unique};

/// The server connections PgBouncer keeps per database and user: fewer than the clients'
/// connections in the tests, so statements of different clients share server connections.
/// Twelve, not six: beside two busy loops, the shared PgBouncer's clients waited up to
/// 82–160 ms for a server connection with six (up to 16 waiting), 2–79 ms with twelve (its
/// `SHOW POOLS`, sampled through four runs of the pgbouncer area each), and the lease tests
/// through it need a renewal answered within 600 ms.
pub const SERVER_POOL: usize = 12;

pub struct PgBouncer {
    port: u16,
    dir: PathBuf,
    child: ServerChild,
    /// The server behind it (its port).
    server_port: u16,
}

/// PgBouncer's program, or a panic that names the test command which installs it.
fn binary() -> PathBuf {
    for dir in ["/usr/sbin", "/usr/bin", "/usr/local/bin"] {
        let path = PathBuf::from(dir).join("pgbouncer");
        if path.is_file() {
            return path;
        }
    }
    panic!(
        "`pgbouncer` is not installed. Run the README's test command, `{TEST_COMMAND}`, which \
         installs the `pgbouncer` package"
    )
}

impl PgBouncer {
    /// PgBouncer in transaction mode in front of `server` (every database of it).
    pub fn start(server: &PostgresServer) -> PgBouncer {
        let dir = std::env::temp_dir().join(unique("distlock-pgbouncer"));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        std::fs::write(
            dir.join("userlist.txt"),
            format!("\"postgres\" \"{PASSWORD}\"\n"),
        )
        .expect("userlist.txt");
        chown_to_server_user(&dir);
        let mut last_error = String::new();
        for _ in 0..5 {
            let mut bouncer = PgBouncer {
                port: free_port(),
                dir: dir.clone(),
                child: ServerChild::default(),
                server_port: server.port(),
            };
            match bouncer.spawn() {
                Ok(()) => return bouncer,
                Err(error) => last_error = error,
            }
        }
        panic!("could not start pgbouncer: {last_error}");
    }

    /// One PgBouncer for all the tests of this binary, in front of the shared server
    /// ([`PostgresServer::shared`]); it dies with the process, its directory is removed at exit.
    pub fn shared() -> &'static PgBouncer {
        static SHARED: std::sync::OnceLock<PgBouncer> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| {
            let bouncer = PgBouncer::start(PostgresServer::shared());
            super::unprivileged::remove_at_exit(bouncer.dir.clone());
            bouncer
        })
    }

    fn spawn(&mut self) -> Result<(), String> {
        let ini = self.dir.join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\n\
                 * = host=127.0.0.1 port={server}\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = scram-sha-256\n\
                 auth_file = {dir}/userlist.txt\n\
                 pool_mode = transaction\n\
                 default_pool_size = {SERVER_POOL}\n\
                 max_client_conn = 2000\n\
                 ignore_startup_parameters = extra_float_digits,options\n\
                 server_login_retry = 1\n\
                 stats_users = postgres\n\
                 logfile = {dir}/log\n\
                 pidfile = {dir}/pid\n",
                server = self.server_port,
                port = self.port,
                dir = self.dir.display(),
            ),
        )
        .map_err(|e| e.to_string())?;
        chown_to_server_user(&self.dir);
        let mut command = Command::new(binary());
        command
            .arg(&ini)
            // Its working directory marks it as this test's (see `kill_processes_in`).
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        as_server_user(&mut command);
        self.child.spawn(command, "pgbouncer")?;
        let port = self.port;
        self.child
            .wait_ready(Duration::from_secs(20), || {
                std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            })
            .map_err(|()| format!("pgbouncer did not start on port {port}: {}", self.log()))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// PgBouncer's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// `postgres://postgres:<password>@127.0.0.1:<port>/postgres`, through PgBouncer.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres:{PASSWORD}@127.0.0.1:{}/postgres",
            self.port
        )
    }

    /// SIGKILL: every client connection drops; the server's connections end with it.
    pub fn kill(&mut self) {
        self.child.kill();
    }

    /// SIGSTOP: connections stay open, nothing is answered.
    pub fn pause(&self) {
        self.child.pause();
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.child.resume();
    }

    /// Starts the killed PgBouncer again on the same port.
    pub fn restart(&mut self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(error) if std::time::Instant::now() > deadline => {
                    panic!("pgbouncer did not restart: {error}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        self.child.kill();
        kill_processes_in(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
