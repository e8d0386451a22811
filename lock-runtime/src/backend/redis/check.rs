//! What a connection checks before the backend is used: the server answers, accepts our
//! credentials and has the scripts, and (`?replicas`) has the replicas asked for.

use redis::{RedisResult, Value};

use super::RedisBackend;
use super::connection::Connection;
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
}
