//! What a connection checks before the backend is used: the server answers, accepts our
//! credentials and has the scripts, and (`?replicas`) has the replicas asked for.

use redis::{RedisResult, Value};

use super::RedisBackend;
use super::connection::Connection;
use crate::admin::Finding;
use crate::error::LockError;

impl RedisBackend {
    /// Connects, checks the server answers and accepts our credentials, and loads the scripts.
    pub(crate) async fn check(&self) -> Result<(), LockError> {
        let (mut conn, _) = self.connection().await.map_err(|e| self.connect_error(e))?;
        let loaded: RedisResult<()> = async {
            redis::cmd("PING").query_async::<()>(&mut conn).await?;
            for script in [
                &self.release,
                &self.renew,
                &self.renew_many,
                &self.write,
                &self.read,
                &self.release_read,
                &self.hand_over,
                &self.vote,
                &self.acquire_fair,
                &self.release_fair,
            ] {
                script.load_async(&mut conn).await?;
            }
            Ok(())
        }
        .await;
        loaded.map_err(|e| self.connect_error(e))?;
        if self.settings.replicas > 0 {
            if self.is_cluster() {
                self.check_cluster_replicas(&mut conn).await?;
            } else {
                self.check_replicas(&mut conn).await?;
            }
        }
        Ok(())
    }

    /// With `?replicas=N` on a cluster: every master that serves slots must have N replicas
    /// connected (`CLUSTER NODES`), or the grants in its slots could never be acknowledged.
    async fn check_cluster_replicas(&self, conn: &mut Connection) -> Result<(), LockError> {
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(conn)
            .await
            .map_err(|e| self.connect_error(e))?;
        let mut masters: Vec<(&str, &str)> = Vec::new();
        let mut replicas_of: Vec<&str> = Vec::new();
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let [id, address, flags, master, _, _, _, link, slots @ ..] = fields.as_slice() else {
                continue;
            };
            if flags.contains("fail") {
                continue;
            }
            if flags.contains("master") && !slots.is_empty() {
                let address = address.split('@').next().unwrap_or(address);
                masters.push((id, address));
            } else if flags.contains("slave") && *link == "connected" {
                replicas_of.push(master);
            }
        }
        for (id, address) in masters {
            let count = replicas_of.iter().filter(|m| **m == id).count();
            self.enough_replicas(&format!("the cluster's master {address}"), count)?;
        }
        Ok(())
    }

    /// `Ok` when `count` replicas of `master` are enough for `?replicas`; otherwise the error
    /// that says so.
    fn enough_replicas(&self, master: &str, count: usize) -> Result<(), LockError> {
        let wanted = self.settings.replicas;
        if count >= usize::from(wanted) {
            return Ok(());
        }
        Err(LockError::Connect {
            url: self.url.clone(),
            reason: format!(
                "`replicas={wanted}` asks every grant to be acknowledged by {wanted} replicas, \
                 but {master} has {count} connected: attach more replicas, or lower `replicas`"
            ),
            source: None,
        })
    }

    /// With `?replicas=N`: the server must be a master with N replicas connected, or no grant
    /// could ever be acknowledged.
    async fn check_replicas(&self, conn: &mut Connection) -> Result<(), LockError> {
        let role: Vec<Value> = redis::cmd("ROLE")
            .query_async(conn)
            .await
            .map_err(|e| self.connect_error(e))?;
        match role.as_slice() {
            [Value::BulkString(role), _, Value::Array(replicas), ..] if role == b"master" => {
                self.enough_replicas("the master", replicas.len())
            }
            _ => Err(LockError::Connect {
                url: self.url.clone(),
                reason: format!(
                    "`replicas={}` needs the URL to name a master, and this server is not one \
                     (ROLE answered {role:?}): name the master, or use `redis+sentinel://` to \
                     find it",
                    self.settings.replicas
                ),
                source: None,
            }),
        }
    }

    /// What `LockClient::check` reports of this server: its clock against this host's, a
    /// Cluster's slots, and the replicas `?replicas=` asks for (which may have gone since the
    /// connection was checked).
    pub(super) async fn diagnose_server(&self) -> Vec<Finding> {
        let mut findings = Vec::new();
        let mut conn = match self.connection().await {
            Ok((conn, _)) => conn,
            Err(error) => {
                findings.push(Finding::fail(
                    "server",
                    format!("no connection: {error}"),
                    "check that the server runs and is reachable",
                ));
                return findings;
            }
        };
        findings.push(self.identity(&mut conn).await);
        findings.push(self.clock(&mut conn).await);
        if self.is_cluster() {
            findings.push(self.cluster_state(&mut conn).await);
        }
        if self.settings.replicas > 0 {
            let checked = if self.is_cluster() {
                self.check_cluster_replicas(&mut conn).await
            } else {
                self.check_replicas(&mut conn).await
            };
            findings.push(match checked {
                Ok(()) => Finding::pass(
                    "replicas",
                    format!(
                        "every master has the {} replicas `?replicas=` asks for",
                        self.settings.replicas
                    ),
                ),
                Err(error) => Finding::fail(
                    "replicas",
                    error.to_string(),
                    "attach more replicas, or lower `?replicas=` (a grant counts only once \
                     that many acknowledged it)",
                ),
            });
        }
        findings
    }

    /// Who the server says this client is (`ACL WHOAMI`), and whether the connection is
    /// encrypted (`rediss://`: TLS, the server's certificate checked).
    async fn identity(&self, conn: &mut Connection) -> Finding {
        let user: RedisResult<String> = redis::cmd("ACL").arg("WHOAMI").query_async(conn).await;
        let tls = self
            .settings
            .tls
            .is_some()
            .then_some("the server's certificate checked");
        crate::admin::identity_finding(user.ok().as_deref(), tls)
    }

    /// The server's clock (`TIME`) against this host's. Redis judges a lease by its own clock
    /// from the moment the command runs, so an offset does not move a lease's end; it moves
    /// the grant times and ages that `distlock show` reads against this host's clock.
    async fn clock(&self, conn: &mut Connection) -> Finding {
        crate::admin::clock_check(async {
            let (seconds, micros): (String, String) =
                redis::cmd("TIME").query_async(conn).await.ok()?;
            Some(seconds.parse::<f64>().ok()? + micros.parse::<f64>().ok()? / 1e6)
        })
        .await
    }

    /// A Cluster serves every slot (`CLUSTER INFO`): a key in an unserved slot cannot be locked.
    async fn cluster_state(&self, conn: &mut Connection) -> Finding {
        let info: RedisResult<String> = redis::cmd("CLUSTER").arg("INFO").query_async(conn).await;
        let Ok(info) = info else {
            return Finding::fail(
                "cluster",
                "CLUSTER INFO refused",
                "let the URL's user run CLUSTER INFO, or check the cluster with redis-cli",
            );
        };
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
                .unwrap_or("?")
                .to_owned()
        };
        let (state, assigned, failing) = (
            field("cluster_state"),
            field("cluster_slots_assigned"),
            field("cluster_slots_fail"),
        );
        let found = format!("state {state}, {assigned} of 16384 slots assigned, {failing} failing");
        if state == "ok" && assigned == "16384" {
            Finding::pass("cluster", found)
        } else {
            Finding::fail(
                "cluster",
                found,
                "assign every slot to a live master (redis-cli --cluster fix): a key in an \
                 unserved slot cannot be locked",
            )
        }
    }
}
