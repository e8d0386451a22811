//! Database servers refuse to run as root (PostgreSQL always, MariaDB without `--user=root`):
//! when the tests run as root, servers run as `nobody`, which owns their scratch directory.

use std::path::Path;
use std::process::Command;

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
