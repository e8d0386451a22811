//! Row 9's peer: Apache Curator's `InterProcessMutex` — the ZooKeeper lock recipe distlock
//! implements — in a JVM of its own (`bench/peers/java/CuratorPeer.java`, compiled with `javac`
//! into `target/peers/java` on first use, against Debian's `libcurator-recipes-java`, which
//! `./scripts/test.sh` installs). The JVM times its own calls, so neither its start-up nor the
//! pipe to the bench is measured; the bench drives it one command at a time over stdin/stdout.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Error;
use crate::peer::LinePeer;

/// The jars Curator 5 and its ZooKeeper client need (Debian's names, `/usr/share/java`).
const JARS: &[&str] = &[
    "curator-recipes",
    "curator-framework",
    "curator-client",
    "zookeeper",
    "zookeeper-jute",
    "guava",
    "slf4j-api",
    "slf4j-nop",
    "netty-handler",
    "netty-transport",
    "netty-common",
    "netty-buffer",
    "netty-resolver",
    "netty-codec",
    "netty-transport-native-epoll",
    "netty-transport-native-unix-common",
];

fn classpath() -> Result<String, Error> {
    let mut paths = Vec::new();
    for jar in JARS {
        let path = Path::new("/usr/share/java").join(format!("{jar}.jar"));
        if !path.exists() {
            return Err(format!(
                "{} is missing: the Curator peer needs Debian's libcurator-recipes-java \
                 (./scripts/test.sh installs it: `apt-get install libcurator-recipes-java`)",
                path.display()
            )
            .into());
        }
        paths.push(path.display().to_string());
    }
    Ok(paths.join(":"))
}

/// Compiles `CuratorPeer.java` into `target/peers/java` unless its class is newer.
fn compiled(classpath: &str) -> Result<PathBuf, Error> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/java/CuratorPeer.java");
    let out = crate::record::target_dir().join("peers/java");
    let class = out.join("CuratorPeer.class");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if modified(&class).is_some() && modified(&class) >= modified(&source) {
        return Ok(out);
    }
    std::fs::create_dir_all(&out)?;
    let status = std::process::Command::new("javac")
        .arg("-cp")
        .arg(classpath)
        .arg("-d")
        .arg(&out)
        .arg(&source)
        .status()
        .map_err(|e| format!("cannot run javac ({e}): install a JDK (default-jdk-headless)"))?;
    if !status.success() {
        return Err(format!("javac {} failed", source.display()).into());
    }
    Ok(out)
}

/// Starts the Curator peer against the ZooKeeper at `hosts` (compiling it first if needed).
pub async fn start(hosts: &str) -> Result<LinePeer, Error> {
    let classpath = classpath()?;
    let classes = compiled(&classpath)?;
    let mut command = Command::new("java");
    command
        .arg("-cp")
        .arg(format!("{classpath}:{}", classes.display()))
        .arg("CuratorPeer")
        .arg(hosts);
    LinePeer::start("Curator", command).await
}
