//! Database servers refuse to run as root (PostgreSQL always, MariaDB without `--user=root`):
//! when the tests run as root, servers run as `nobody`, which owns their scratch directory.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Scratch directories of servers shared by a whole test binary, removed when it exits.
static AT_EXIT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Removes `dir` when the test process exits (a shared server lives in a static, which no
/// `Drop` reaches; the server itself dies by its parent-death signal).
pub fn remove_at_exit(dir: PathBuf) {
    extern "C" fn remove_all() {
        for dir in AT_EXIT.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            kill_processes_in(dir);
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    let mut dirs = AT_EXIT.lock().unwrap_or_else(|p| p.into_inner());
    if dirs.is_empty() {
        // SAFETY: registering a plain function; it runs once at exit.
        unsafe { libc::atexit(remove_all) };
    }
    dirs.push(dir);
}

/// SIGKILLs every process whose working directory is inside `dir` — a server's processes
/// (PostgreSQL's run in their data directory) — before `dir` is removed. At exit the server is
/// still running (it dies by its parent-death signal only after): a PostgreSQL background
/// writer whose files vanish retries its writes forever instead of noticing that its
/// postmaster died, a busy process left behind.
pub fn kill_processes_in(dir: &Path) {
    for (pid, proc_dir) in processes() {
        if std::fs::read_link(proc_dir.join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir)) {
            // SAFETY: signalling a process by pid.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Every process of this machine: its pid and its `/proc/<pid>` directory.
pub fn processes() -> impl Iterator<Item = (libc::pid_t, PathBuf)> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse().ok()?;
            Some((pid, entry.path()))
        })
}

/// Runs `command` as `nobody` when we are root.
pub fn as_server_user(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        command.uid(65534).gid(65534);
    }
}

pub fn chown_to_server_user(path: &Path) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let status = Command::new("chown")
            .arg("-R")
            .arg("65534:65534")
            .arg(path)
            .status()
            .expect("chown");
        assert!(status.success(), "chown {} failed", path.display());
    }
}
