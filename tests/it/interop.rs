//! Sharing locks with other languages' libraries, against the real libraries: Apache Curator's
//! `InterProcessMutex` (Java) on ZooKeeper, and etcd's own `concurrency.Mutex` through
//! `etcdctl lock` (Go) on etcd. Each side waits for the other's holder and is woken by its
//! release; a holder killed with `kill -9` frees the other side once its session ends; two of
//! each side incrementing one number under the lock lose no update; a distlock reader or
//! semaphore permit is never taken for a free lock by the other side.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use distlock::LockClient;
use support::unique;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(unique("distlock-interop"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `n` read-pause-write increments of the number in `file` under distlock's lock `key`.
async fn increments(client: LockClient, key: String, file: PathBuf, n: u32) {
    for _ in 0..n {
        let guard = client
            .lock(key.as_str())
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        let value: u64 = text.trim().parse().unwrap_or(0);
        tokio::time::sleep(ms(2)).await;
        std::fs::write(&file, (value + 1).to_string()).unwrap();
        guard.release().await.unwrap();
    }
}

fn number_in(file: &std::path::Path) -> u64 {
    std::fs::read_to_string(file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Curator's `InterProcessMutex` on `<chroot>/lock:<key>` is distlock's `lock(key)` on
/// `zk://…<chroot>` (the default prefix `lock:`).
#[cfg(feature = "zookeeper")]
mod curator {
    use super::*;
    use support::curator::{CuratorHold, Side, increments as curator_increments};
    use support::zookeeper::ZkServer;

    struct Setup {
        client: LockClient,
        connect: String,
        chroot: String,
        url: String,
    }

    async fn setup() -> Setup {
        setup_with("").await
    }

    /// With `query` (`?recipe=rwlock`) after the URL.
    async fn setup_with(query: &str) -> Setup {
        let server = ZkServer::shared();
        let chroot = format!("/{}", unique("curator"));
        let url = format!("{}{query}", server.url(&chroot));
        // The chroot must exist for Curator (distlock creates its parents itself).
        let zk = support::zookeeper::client(server.client_port).await;
        let _ = zk
            .create(
                &chroot,
                &[],
                &zookeeper_client::CreateMode::Persistent
                    .with_acls(zookeeper_client::Acls::anyone_all()),
            )
            .await;
        Setup {
            client: LockClient::connect(&url).await.unwrap(),
            connect: format!("127.0.0.1:{}", server.client_port),
            chroot,
            url,
        }
    }

    impl Setup {
        fn path(&self, key: &str) -> String {
            format!("{}/lock:{key}", self.chroot)
        }

        async fn children(&self, key: &str) -> Vec<String> {
            let zk = support::zookeeper::client(ZkServer::shared().client_port).await;
            zk.list_children(&self.path(key)).await.unwrap_or_default()
        }
    }

    /// Curator holds: distlock sees a holder, waits, and is woken by Curator's release (well
    /// before its 30 s wait or any lease could end: the watch on Curator's node); then distlock
    /// holds and Curator waits until distlock's release. Nothing is left behind.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_side_waits_for_the_other_and_is_woken_by_its_release() {
        let s = setup().await;
        let mut curator = CuratorHold::start(&s.connect, Duration::from_secs(10), &s.path("a"));
        let node = curator
            .acquired(Duration::from_secs(60))
            .await
            .expect("Curator holds");
        assert!(node.contains("-lock-"), "{node}");
        assert!(
            s.client.inspect("a").await.unwrap().is_some(),
            "distlock sees Curator's lock"
        );
        assert!(s.client.lock("a").try_acquire().await.unwrap().is_none());
        let client = s.client.clone();
        let waiting = tokio::spawn(async move {
            let guard = client
                .lock("a")
                .wait(Duration::from_secs(30))
                .acquire()
                .await;
            (guard, Instant::now())
        });
        tokio::time::sleep(ms(500)).await;
        assert!(
            !waiting.is_finished(),
            "distlock took the lock beside Curator"
        );
        let released = curator.release().await;
        let (guard, granted) = waiting.await.unwrap();
        let guard = guard.expect("granted after Curator's release");
        let after = granted.saturating_duration_since(released);
        assert!(
            after < Duration::from_secs(5),
            "granted {after:?} after the release"
        );
        // The reverse: Curator waits for distlock.
        let mut curator = CuratorHold::start(&s.connect, Duration::from_secs(10), &s.path("a"));
        assert_eq!(
            curator.acquired(Duration::from_secs(2)).await,
            None,
            "Curator beside distlock"
        );
        guard.release().await.unwrap();
        let node = curator.acquired(Duration::from_secs(10)).await;
        assert!(
            node.is_some(),
            "Curator was not woken by distlock's release"
        );
        curator.release().await;
        assert_eq!(
            s.children("a").await,
            Vec::<String>::new(),
            "nodes left behind"
        );
    }

    /// A Curator holder killed with `kill -9`: distlock is granted once ZooKeeper ends its
    /// session (3 s), not before.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_killed_curator_holder_frees_distlock_when_its_session_ends() {
        let s = setup().await;
        let session = Duration::from_secs(3);
        let mut curator = CuratorHold::start(&s.connect, session, &s.path("k"));
        curator
            .acquired(Duration::from_secs(60))
            .await
            .expect("Curator holds");
        let killed = Instant::now();
        curator.kill().await;
        let guard = s
            .client
            .lock("k")
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .expect("granted once the session ended");
        let after = killed.elapsed();
        assert!(
            after >= session / 2,
            "granted {after:?} after the kill: the session was alive"
        );
        assert!(
            after < session + Duration::from_secs(10),
            "granted only {after:?} after"
        );
        guard.release().await.unwrap();
    }

    /// Two Curator processes and two distlock clients (sessions of their own), 100
    /// read-pause-write increments each of one number under the one lock: 400, no update lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn curator_and_distlock_processes_lose_no_increment() {
        let s = setup().await;
        let dir = scratch();
        let file = dir.join("n");
        std::fs::write(&file, "0").unwrap();
        let java: Vec<_> = (0..2)
            .map(|_| {
                curator_increments(
                    &s.connect,
                    Duration::from_secs(10),
                    &s.path("n"),
                    Side::Mutex,
                    &file,
                    100,
                )
            })
            .collect();
        let mut ours = Vec::new();
        for _ in 0..2 {
            let client = LockClient::connect(&s.url).await.unwrap();
            ours.push(tokio::spawn(increments(
                client,
                "n".into(),
                file.clone(),
                100,
            )));
        }
        for task in ours {
            task.await.unwrap();
        }
        for child in java {
            let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
                .await
                .expect("Curator finished")
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(number_in(&file), 400);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A distlock reader and a distlock semaphore permit are never a free lock to Curator: its
    /// mutex waits until they are given back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn curator_waits_for_distlock_readers_and_permits() {
        let s = setup().await;
        for (key, permit) in [("r", false), ("p", true)] {
            let guard = if permit {
                s.client.semaphore(key, 3).acquire().await.unwrap()
            } else {
                s.client.lock(key).read().acquire().await.unwrap()
            };
            let mut curator = CuratorHold::start(&s.connect, Duration::from_secs(10), &s.path(key));
            assert_eq!(
                curator.acquired(Duration::from_secs(2)).await,
                None,
                "Curator took `{key}` beside distlock's {}",
                if permit { "permit" } else { "reader" }
            );
            guard.release().await.unwrap();
            assert!(curator.acquired(Duration::from_secs(10)).await.is_some());
            curator.release().await;
        }
    }

    /// With `?recipe=rwlock`, distlock's read/write lock is Curator's `InterProcessReadWriteLock`
    /// on the same path: readers of both hold together, a writer of either waits for the
    /// other's readers and excludes everyone; two Curator and two distlock writers × 50
    /// increments lose none.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn curators_read_write_lock_shares_distlocks_with_recipe_rwlock() {
        let s = setup_with("?recipe=rwlock").await;
        let session = Duration::from_secs(10);
        let other = LockClient::connect(&s.url).await.unwrap();
        let reader = s.client.lock("rw").read().acquire().await.unwrap();
        let mut curator_reader =
            CuratorHold::start_side(&s.connect, session, &s.path("rw"), Side::Read);
        let node = curator_reader.acquired(Duration::from_secs(60)).await;
        assert!(
            node.is_some_and(|n| n.contains("__READ__")),
            "readers hold together"
        );
        let mut curator_writer =
            CuratorHold::start_side(&s.connect, session, &s.path("rw"), Side::Write);
        assert_eq!(
            curator_writer.acquired(Duration::from_secs(2)).await,
            None,
            "a Curator writer beside readers"
        );
        assert!(
            other.lock("rw").try_acquire().await.unwrap().is_none(),
            "a distlock writer beside readers"
        );
        reader.release().await.unwrap();
        assert_eq!(
            curator_writer.acquired(ms(500)).await,
            None,
            "a writer beside Curator's reader"
        );
        curator_reader.release().await;
        assert!(
            curator_writer
                .acquired(Duration::from_secs(10))
                .await
                .is_some(),
            "the writer was not woken"
        );
        assert!(
            other
                .lock("rw")
                .read()
                .try_acquire()
                .await
                .unwrap()
                .is_none(),
            "a distlock reader beside Curator's writer"
        );
        curator_writer.release().await;
        // Writers of both sides, incrementing one number.
        let dir = scratch();
        let file = dir.join("n");
        std::fs::write(&file, "0").unwrap();
        let java: Vec<_> = (0..2)
            .map(|_| curator_increments(&s.connect, session, &s.path("n"), Side::Write, &file, 50))
            .collect();
        let ours = [
            tokio::spawn(increments(s.client.clone(), "n".into(), file.clone(), 50)),
            tokio::spawn(increments(other.clone(), "n".into(), file.clone(), 50)),
        ];
        for task in ours {
            task.await.unwrap();
        }
        for child in java {
            let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
                .await
                .expect("Curator finished")
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(number_in(&file), 200);
        assert_eq!(
            s.children("rw").await,
            Vec::<String>::new(),
            "nodes left behind"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// etcd's `concurrency.Mutex` (`etcdctl lock NAME`) on `<prefix>/lock:<key>` is distlock's
/// `lock(key)` on `etcd://…/<prefix>`.
#[cfg(feature = "etcd")]
mod etcdctl {
    use super::*;
    use support::etcd::EtcdMember;
    use tokio::process::{Child, Command};

    struct Setup {
        client: LockClient,
        endpoint: String,
        prefix: String,
        url: String,
    }

    async fn setup() -> Setup {
        let member = EtcdMember::shared();
        let prefix = unique("etcdctl");
        let url = member.url(&prefix);
        Setup {
            client: LockClient::connect(&url).await.unwrap(),
            endpoint: format!("127.0.0.1:{}", member.client_port),
            prefix,
            url,
        }
    }

    impl Setup {
        /// `etcdctl lock --ttl <ttl s> <prefix>/lock:<key> -- sh -c <script>` with `D` set.
        fn lock(&self, key: &str, ttl: u32, script: &str, dir: &std::path::Path) -> Child {
            let etcdctl = which("etcdctl");
            Command::new(etcdctl)
                .env("ETCDCTL_API", "3")
                .env("D", dir)
                .args([
                    "--endpoints",
                    &self.endpoint,
                    "lock",
                    "--ttl",
                    &ttl.to_string(),
                ])
                .arg(format!("{}/lock:{key}", self.prefix))
                .args(["--", "sh", "-c", script])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .unwrap()
        }
    }

    fn which(binary: &str) -> PathBuf {
        let path = PathBuf::from("/usr/bin").join(binary);
        assert!(
            path.exists(),
            "{binary} is missing: Debian's etcd-client has it; run {}",
            support::TEST_COMMAND
        );
        path
    }

    async fn wait_for_file(path: &std::path::Path, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if path.exists() {
                return true;
            }
            tokio::time::sleep(ms(20)).await;
        }
        false
    }

    /// `etcdctl lock` holds while its command runs: distlock waits and is woken as it exits;
    /// then distlock holds and `etcdctl lock` does not run its command until distlock's release.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_side_waits_for_the_other_and_is_woken_by_its_release() {
        let s = setup().await;
        let dir = scratch();
        let holder = s.lock(
            "a",
            10,
            r#"touch "$D/held"; while [ ! -e "$D/go" ]; do sleep 0.02; done"#,
            &dir,
        );
        assert!(wait_for_file(&dir.join("held"), Duration::from_secs(30)).await);
        assert!(
            s.client.inspect("a").await.unwrap().is_some(),
            "distlock sees etcdctl's lock"
        );
        assert!(s.client.lock("a").try_acquire().await.unwrap().is_none());
        let client = s.client.clone();
        let waiting = tokio::spawn(async move {
            let guard = client
                .lock("a")
                .wait(Duration::from_secs(30))
                .acquire()
                .await;
            (guard, Instant::now())
        });
        tokio::time::sleep(ms(500)).await;
        assert!(
            !waiting.is_finished(),
            "distlock took the lock beside etcdctl"
        );
        std::fs::write(dir.join("go"), "").unwrap();
        let out = holder.wait_with_output().await.unwrap();
        let released = Instant::now();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (guard, granted) = waiting.await.unwrap();
        let guard = guard.expect("granted after etcdctl's release");
        let after = granted.saturating_duration_since(released);
        assert!(
            after < Duration::from_secs(5),
            "granted {after:?} after the release"
        );
        // The reverse.
        let waiter = s.lock("a", 10, r#"touch "$D/ran""#, &dir);
        tokio::time::sleep(ms(1_500)).await;
        assert!(
            !dir.join("ran").exists(),
            "etcdctl ran its command beside distlock"
        );
        guard.release().await.unwrap();
        assert!(wait_for_file(&dir.join("ran"), Duration::from_secs(10)).await);
        let out = waiter.wait_with_output().await.unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            s.client.inspect("a").await.unwrap().is_none(),
            "a key left behind"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An `etcdctl lock` holder killed with `kill -9`: distlock is granted once its session's
    /// lease (2 s) runs out.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_killed_etcdctl_holder_frees_distlock_when_its_lease_ends() {
        let s = setup().await;
        let dir = scratch();
        let mut holder = s.lock("k", 2, r#"touch "$D/held"; sleep 60"#, &dir);
        assert!(wait_for_file(&dir.join("held"), Duration::from_secs(30)).await);
        let killed = Instant::now();
        holder.kill().await.unwrap();
        let guard = s
            .client
            .lock("k")
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .expect("granted once the lease ended");
        let after = killed.elapsed();
        assert!(
            after >= ms(500),
            "granted {after:?} after the kill: the lease was alive"
        );
        assert!(
            after < Duration::from_secs(12),
            "granted only {after:?} after"
        );
        guard.release().await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Two shell loops of `etcdctl lock` and two distlock clients, 50 read-pause-write
    /// increments each of one number under the one lock: 200, no update lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcdctl_and_distlock_lose_no_increment() {
        let s = setup().await;
        let dir = scratch();
        let file = dir.join("n");
        std::fs::write(&file, "0").unwrap();
        let etcdctl = which("etcdctl");
        let name = format!("{}/lock:n", s.prefix);
        let script = format!(
            r#"for i in $(seq 50); do ETCDCTL_API=3 {} --endpoints {} lock --ttl 10 '{name}' -- sh -c 'v=$(cat "$D/n"); sleep 0.002; echo $((v + 1)) > "$D/n"' || exit 1; done"#,
            etcdctl.display(),
            s.endpoint
        );
        let loops: Vec<Child> = (0..2)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", &script])
                    .env("D", &dir)
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .kill_on_drop(true)
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut ours = Vec::new();
        for _ in 0..2 {
            let client = LockClient::connect(&s.url).await.unwrap();
            ours.push(tokio::spawn(increments(
                client,
                "n".into(),
                file.clone(),
                50,
            )));
        }
        for task in ours {
            task.await.unwrap();
        }
        for child in loops {
            let out = tokio::time::timeout(Duration::from_secs(180), child.wait_with_output())
                .await
                .expect("the etcdctl loop finished")
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(number_in(&file), 200);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A distlock reader and a distlock semaphore permit are never a free lock to
    /// `etcdctl lock`: it waits until they are given back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcdctl_waits_for_distlock_readers_and_permits() {
        let s = setup().await;
        let dir = scratch();
        for (key, permit) in [("r", false), ("p", true)] {
            let guard = if permit {
                s.client.semaphore(key, 3).acquire().await.unwrap()
            } else {
                s.client.lock(key).read().acquire().await.unwrap()
            };
            let ran = dir.join(format!("ran-{key}"));
            let waiter = s.lock(key, 10, &format!(r#"touch "{}""#, ran.display()), &dir);
            tokio::time::sleep(ms(1_500)).await;
            assert!(!ran.exists(), "etcdctl took `{key}` beside distlock");
            guard.release().await.unwrap();
            assert!(wait_for_file(&ran, Duration::from_secs(10)).await);
            let out = waiter.wait_with_output().await.unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
