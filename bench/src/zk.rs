//! Row 9, ZooKeeper: the raw floor is the recipe's own calls made by hand — create an
//! ephemeral sequential node under the key's parent, list the parent, delete the node (and, for
//! a fresh key, create the parent first) — on a session of the bench's own, against the same
//! server; and the peer, Apache Curator's `InterProcessMutex` (`bench/src/curator.rs`).

use std::sync::Arc;

use zookeeper_client as zk;

use crate::Error;
use crate::sql::RawPair;

/// Raw lock + release: the recipe's calls on `/bench-raw/<key>/lock-`.
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
    /// A fresh key: create the parent (a container), create the node, list, delete — four
    /// calls. A used key: the last three (the parent is made if it turns out to be missing).
    async fn pair(&self, conn: usize, key: &str, fresh: bool) -> Result<(), Error> {
        let client = &self.clients[conn % self.clients.len()];
        let parent = format!("/bench-raw/{}", key.replace('/', "_"));
        let container = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
        let node = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let prefix = format!("{parent}/lock-");
        if fresh {
            match client.create(&parent, &[], &container).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let (_, sequence) = match client.create(&prefix, b"holder", &node).await {
            Err(zk::Error::NoNode) => {
                match client.create(&parent, &[], &container).await {
                    Ok(_) | Err(zk::Error::NodeExists) => {}
                    Err(e) => return Err(e.into()),
                }
                client.create(&prefix, b"holder", &node).await?
            }
            created => created?,
        };
        let children = client.list_children(&parent).await?;
        assert!(!children.is_empty(), "the node is listed");
        client.delete(&format!("{prefix}{sequence}"), None).await?;
        Ok(())
    }
}

/// The server's count of packets received and sent so far (`mntr`).
fn packets(port: u16) -> (f64, f64) {
    let reply = support::zookeeper::four_letter(port, "mntr").unwrap_or_default();
    let field = |name: &str| {
        reply
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(f64::NAN)
    };
    (field("zk_packets_received"), field("zk_packets_sent"))
}

/// Requests the server received and packets it sent per lock + release of `side`, over
/// `calls` calls one after another (fresh keys, or one reused key): the round trips the
/// recipe costs, whatever the machine's speed.
pub async fn requests_per_call(
    port: u16,
    side: &impl crate::sql::Peer,
    prefix: &str,
    calls: u64,
    reused: bool,
) -> Result<(f64, f64), Error> {
    let (received, sent) = packets(port);
    side.sequential(prefix, calls, reused).await?;
    // Let the last notifications and clean-ups land.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let (received_after, sent_after) = packets(port);
    Ok((
        (received_after - received) / calls as f64,
        (sent_after - sent) / calls as f64,
    ))
}
