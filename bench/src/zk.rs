//! Row 9, ZooKeeper: the raw floor is what the recipe cannot do without — create an ephemeral
//! node, delete it — on sessions of the bench's own, against the same server.

use std::sync::Arc;

use zookeeper_client as zk;

use crate::Error;
use crate::sql::RawPair;

/// Raw pairs: `create` an ephemeral `/bench-raw/<key>`, `delete` it.
#[derive(Clone)]
pub struct ZkRaw {
    clients: Arc<Vec<zk::Client>>,
}

impl ZkRaw {
    /// `sessions` sessions to the server at `hosts`.
    pub async fn connect(hosts: &str, sessions: usize) -> Result<ZkRaw, Error> {
        let mut clients = Vec::new();
        for _ in 0..sessions {
            clients.push(
                zk::Client::connector()
                    .with_session_timeout(std::time::Duration::from_secs(30))
                    .connect(hosts)
                    .await?,
            );
        }
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        match clients[0].create("/bench-raw", &[], &persistent).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(ZkRaw {
            clients: Arc::new(clients),
        })
    }
}

impl RawPair for ZkRaw {
    async fn pair(&self, conn: usize, key: &str) -> Result<(), Error> {
        let client = &self.clients[conn % self.clients.len()];
        let path = format!("/bench-raw/{}", key.replace('/', "_"));
        let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
        client.create(&path, b"holder", &ephemeral).await?;
        client.delete(&path, None).await?;
        Ok(())
    }
}
