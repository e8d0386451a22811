//! A MariaDB server of the tests' own: `mariadb-install-db` into a scratch directory,
//! `mariadbd` on a free loopback port (as `nobody` when the tests run as root). A start-up file
//! creates the user [`USER`] (password [`PASSWORD`]) and the database [`DATABASE`] the tests
//! use; the data survives [`MysqlServer::restart`] and [`kill`](MysqlServer::kill).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::unprivileged::{as_server_user, chown_to_server_user, remove_at_exit};
use super::{TEST_COMMAND, free_port, output_tied, spawn_tied, unique};

pub const USER: &str = "distlock";
pub const PASSWORD: &str = "distlock-test";
pub const DATABASE: &str = "distlock";

pub struct MysqlServer {
    port: u16,
    /// The scratch directory: `data/`, the socket, the start-up file and the log.
    dir: PathBuf,
    child: Option<Child>,
    owned: bool,
    /// Extra `mariadbd` arguments (TLS).
    extra: Vec<String>,
    /// TLS only over TCP (`require_secure_transport`); the test's own connections use the
    /// socket.
    tls: bool,
}

/// A user that must present a client certificate its CA signed (`REQUIRE X509`).
pub const X509_USER: &str = "distlock_x509";

/// A MariaDB (or MySQL) program: on `PATH`, in `/usr/sbin` (Debian puts the server there, off a
/// normal user's `PATH`), under one of its names.
fn binary(names: &[&str]) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/bin"].map(PathBuf::from));
    for name in names {
        if let Some(found) = dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()) {
            return found;
        }
    }
    panic!(
        "`{}` (MariaDB) is not installed. Run the README's test command, `{TEST_COMMAND}`, \
         which installs the `mariadb-server` package",
        names[0]
    )
}

impl MysqlServer {
    pub fn start() -> MysqlServer {
        MysqlServer::start_with(Vec::new(), false)
    }

    /// A server as managed MySQL offerings run it: TCP connections must use TLS
    /// (`require_secure_transport`), with the process's test certificates
    /// ([`certs::Certificates`](crate::certs::Certificates)). [`url`](Self::url) then asks for
    /// `ssl-mode=VERIFY_IDENTITY` with the test CA.
    pub fn start_tls() -> MysqlServer {
        let certs = crate::certs::Certificates::shared();
        let extra = vec![
            format!("--ssl-ca={}", certs.ca.display()),
            format!("--ssl-cert={}", certs.server_cert.display()),
            format!("--ssl-key={}", certs.server_key.display()),
            "--require-secure-transport=ON".to_owned(),
        ];
        MysqlServer::start_with(extra, true)
    }

    fn start_with(extra: Vec<String>, tls: bool) -> MysqlServer {
        let dir = std::env::temp_dir().join(unique("distlock-mariadb"));
        std::fs::create_dir_all(dir.join("data")).expect("scratch directory");
        // Temporary tables go to a directory of this server's own: in the shared /tmp, their
        // files (named by the server's pid) collided across concurrent bootstraps (seen:
        // `Unknown table 'mysql.tmp_user_sys'` from `mariadb-install-db`).
        std::fs::create_dir_all(dir.join("tmp")).expect("scratch directory");
        std::fs::write(
            dir.join("init.sql"),
            format!(
                "CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}';\n\
                 GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'127.0.0.1' WITH GRANT OPTION;\n\
                 CREATE USER IF NOT EXISTS '{USER}'@'localhost' IDENTIFIED BY '{PASSWORD}';\n\
                 GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'localhost' WITH GRANT OPTION;\n\
                 CREATE USER IF NOT EXISTS '{X509_USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}' \
                 REQUIRE X509;\n\
                 GRANT ALL PRIVILEGES ON *.* TO '{X509_USER}'@'127.0.0.1';\n\
                 CREATE DATABASE IF NOT EXISTS {DATABASE};\n"
            ),
        )
        .expect("start-up file");
        chown_to_server_user(&dir);
        let mut install = Command::new(binary(&["mariadb-install-db", "mysql_install_db"]));
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .args(["--skip-test-db", "--auth-root-authentication-method=normal"])
            .arg("--skip-name-resolve")
            .arg(format!("--tmpdir={}", dir.join("tmp").display()));
        as_server_user(&mut install);
        let out = output_tied(install).expect("mariadb-install-db runs");
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        assert!(
            out.status.success(),
            "mariadb-install-db failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut last_error = String::new();
        for _ in 0..5 {
            let mut server = MysqlServer {
                port: free_port(),
                dir: dir.clone(),
                child: None,
                owned: true,
                extra: extra.clone(),
                tls,
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(error) => {
                    last_error = error;
                    server.owned = false;
                }
            }
        }
        panic!("could not start mariadbd: {last_error}");
    }

    /// One TLS-only server ([`start_tls`](Self::start_tls)) for all the tests of this binary
    /// (each test with a lock table of its own): the conformance suite's TLS cases, which never
    /// fault it. It dies with the process; its directory is removed at exit.
    pub fn shared_tls() -> &'static MysqlServer {
        static SHARED: std::sync::OnceLock<MysqlServer> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| {
            let mut server = MysqlServer::start_tls();
            server.owned = false;
            remove_at_exit(server.dir.clone());
            server
        })
    }

    /// One server for all the tests of this binary (it dies with the process; its scratch
    /// directory is removed at exit).
    pub fn shared() -> &'static MysqlServer {
        static SHARED: std::sync::OnceLock<MysqlServer> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| {
            let mut server = MysqlServer::start();
            server.owned = false;
            remove_at_exit(server.dir.clone());
            server
        })
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log = std::fs::File::create(self.dir.join("log")).map_err(|e| e.to_string())?;
        chown_to_server_user(&self.dir.join("log"));
        let mut command = Command::new(binary(&["mariadbd", "mysqld"]));
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!("--socket={}", self.dir.join("sock").display()))
            .arg(format!("--pid-file={}", self.dir.join("pid").display()))
            .arg(format!(
                "--init-file={}",
                self.dir.join("init.sql").display()
            ))
            .arg(format!("--port={}", self.port))
            .arg(format!("--tmpdir={}", self.dir.join("tmp").display()))
            .args(["--bind-address=127.0.0.1", "--skip-name-resolve"])
            .args(["--max-connections=500", "--skip-log-bin"])
            // `mode=named` reads who holds a named lock from its `METADATA_LOCK_INFO`.
            .arg("--plugin-load-add=metadata_lock_info")
            // Durability against a machine crash is not under test; a process crash (kill -9)
            // loses nothing that was committed.
            .args([
                "--innodb-flush-log-at-trx-commit=2",
                "--innodb-buffer-pool-size=64M",
            ])
            .args(["--innodb-use-native-aio=0", "--innodb-doublewrite=0"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        as_server_user(&mut command);
        self.child = Some(spawn_tied(command).map_err(|e| format!("cannot run mariadbd: {e}"))?);
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
                if let Some(mut child) = self.child.take() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                return Err(format!(
                    "mariadbd did not start on port {}: {}",
                    self.port,
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn is_ready(&self) -> bool {
        let log = self.log();
        log.contains("ready for connections")
            && std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `mysql://distlock:<password>@127.0.0.1:<port>/distlock`
    pub fn url(&self) -> String {
        self.url_for(DATABASE)
    }

    pub fn url_for(&self, db: &str) -> String {
        let url = format!("mysql://{USER}:{PASSWORD}@127.0.0.1:{}/{db}", self.port);
        match self.tls {
            false => url,
            true => format!(
                "{url}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
                crate::certs::Certificates::shared().ca.display()
            ),
        }
    }

    /// A plain connection to the test database (through the socket for a TLS server).
    pub async fn conn(&self) -> mysql_async::Conn {
        let opts = if self.tls {
            mysql_async::OptsBuilder::default()
                .socket(Some(self.dir.join("sock").display().to_string()))
                .user(Some(USER))
                .pass(Some(PASSWORD))
                .db_name(Some(DATABASE))
        } else {
            let opts = mysql_async::Opts::from_url(&self.url()).expect("test URL");
            mysql_async::OptsBuilder::from_opts(opts).prefer_socket(false)
        };
        mysql_async::Conn::new(opts)
            .await
            .expect("connect to the test mariadb")
    }

    /// Kills the server (SIGKILL: a crash). The data stays.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP: connections stay open, nothing is answered, like a hung host.
    pub fn pause(&self) {
        super::signal(self.child.as_ref().expect("running").id(), libc::SIGSTOP);
    }

    /// Lets a paused server run again (SIGCONT).
    pub fn resume(&self) {
        super::signal(self.child.as_ref().expect("running").id(), libc::SIGCONT);
    }

    /// Stops the server cleanly (SIGTERM) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let _ = child.wait();
        }
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

impl Drop for MysqlServer {
    fn drop(&mut self) {
        self.kill();
        if self.owned {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
