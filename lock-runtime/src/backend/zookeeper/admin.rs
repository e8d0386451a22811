//! The admin view (`Admin`): the nodes of a lock's queue as a holder and its waiters, and the
//! server's version.

use zookeeper_client as zk;

use super::path::{decode, is_reader, parent_of, parse_node, sequence_of, token_of};
use super::{ZkFailure, ZookeeperBackend};
use crate::admin::{ChangeFeed, Entry, Listing, holder_from_record};
use crate::backend::Admin;
use crate::backend::Freed;
use crate::error::BoxError;
use crate::runtime::BoxFuture;

impl Admin for ZookeeperBackend {
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move { Ok(self.holder_of(name).await?.map(|(entry, _)| entry)) })
    }
    fn list<'a>(&'a self, listing: Listing<'a>) -> BoxFuture<'a, Result<Vec<Entry>, BoxError>> {
        Box::pin(async move {
            let client = self.any_client().await?;
            let parents = self
                .call("list", client.list_children("/"))
                .await
                .map_err(|f| self.failed("list", f))?;
            let mut names: Vec<String> = parents
                .iter()
                .filter_map(|parent| decode(parent))
                .filter(|name| listing.matches(name))
                .collect();
            names.sort();
            let mut entries = Vec::new();
            for name in names {
                if entries.len() >= listing.limit {
                    break;
                }
                if let Some((entry, _)) = self.holder_of(&name).await? {
                    entries.push(entry);
                }
            }
            Ok(entries)
        })
    }
    fn force_release<'a>(&'a self, name: &'a str) -> Freed<'a> {
        Box::pin(async move {
            let Some((entry, paths)) = self.holder_of(name).await? else {
                return Ok(None);
            };
            let client = self.any_client().await?;
            // Deleting the holders' nodes wakes the next in line (it watches such a node) and
            // tells each holder at once (it watches its own node too).
            for path in paths {
                match self.call("delete", client.delete(&path, None)).await {
                    Ok(()) | Err(ZkFailure::Server(zk::Error::NoNode)) => {}
                    Err(failure) => return Err(self.failed("delete", failure)),
                }
            }
            Ok(Some(entry))
        })
    }
    /// Who the session is, the chroot's ACL, the server's clock (`check.rs`).
    fn diagnose(&self) -> BoxFuture<'_, Vec<crate::admin::Finding>> {
        Box::pin(self.diagnose_server())
    }
    /// An ephemeral node beside the lock's parent, then its delete: the least a lock on
    /// ZooKeeper takes (Curator's and distlock's lock also list the queue).
    fn raw_pair<'a>(
        &'a self,
        name: &'a str,
        token: &'a str,
        _lease: std::time::Duration,
    ) -> BoxFuture<'a, Option<Result<(), BoxError>>> {
        Box::pin(async move {
            let pair = async {
                let client = self.any_client().await?;
                let path = format!("{}.raw", super::path::parent_of(name));
                let options = zk::CreateMode::Ephemeral.with_acls(self.access.acls());
                match self
                    .call("create", client.create(&path, token.as_bytes(), &options))
                    .await
                {
                    Ok(_) => {}
                    Err(ZkFailure::Server(zk::Error::NodeExists)) => {
                        return Err(format!("`{name}` is held: nothing taken").into());
                    }
                    Err(failure) => return Err(self.failed("create", failure)),
                }
                self.call("delete", client.delete(&path, None))
                    .await
                    .map_err(|f| self.failed("delete", f))?;
                Ok::<(), BoxError>(())
            };
            Some(pair.await)
        })
    }
    fn server_version(&self) -> BoxFuture<'_, Result<String, BoxError>> {
        Box::pin(async move {
            let client = self.any_client().await?;
            self.call("exists", client.check_stat("/"))
                .await
                .map_err(|f| self.failed("exists", f))?;
            // The version comes from the `srvr` four-letter word (whitelisted by default).
            if let Some(version) = self.version.get() {
                return Ok(version.clone());
            }
            let version = match self.srvr().await {
                Some(version) => self.version.get_or_init(|| version).clone(),
                None => "ZooKeeper (version unknown: `srvr` is not whitelisted)".to_owned(),
            };
            Ok(version)
        })
    }
    /// A persistent recursive watch on the tree's root (ZooKeeper 3.6+): every node created
    /// or deleted under it — an ephemeral node's session ending deletes it too.
    fn changes<'a>(
        &'a self,
        _prefix: &'a str,
    ) -> BoxFuture<'a, Result<Option<ChangeFeed>, BoxError>> {
        Box::pin(async move {
            let client = self.any_client().await?;
            let recursive = zk::AddWatchMode::PersistentRecursive;
            let mut watcher = self
                .call("watch", client.watch("/", recursive))
                .await
                .map_err(|f| self.failed("watch", f))?;
            Ok(Some(ChangeFeed::spawn(move |changed| async move {
                let _session = client;
                loop {
                    let event = watcher.changed().await;
                    if event.event_type == zk::EventType::Session
                        && event.session_state.is_terminated()
                    {
                        return;
                    }
                    // A node changed, or the session reconnected (changes meanwhile were not
                    // announced): either way, look again.
                    changed.send_replace(());
                }
            })))
        })
    }
}

impl ZookeeperBackend {
    /// The holder of lock `name` — the lowest sequence in its queue, or the readers at its
    /// head — and their nodes' paths.
    async fn holder_of(&self, name: &str) -> Result<Option<(Entry, Vec<String>)>, BoxError> {
        let client = self.any_client().await?;
        let parent = parent_of(name);
        'look: for _ in 0..5 {
            let children = match self.call("list", client.list_children(&parent)).await {
                Ok(children) => children,
                Err(ZkFailure::Server(zk::Error::NoNode)) => return Ok(None),
                Err(failure) => return Err(self.failed("list", failure)),
            };
            let mut queue: Vec<(i64, &String)> = children
                .iter()
                .filter_map(|child| Some((sequence_of(child)?, child)))
                .collect();
            queue.sort();
            let Some((_, first)) = queue.first() else {
                return Ok(None);
            };
            // Readers at the head of the queue hold the lock together; the first `n` nodes of
            // a semaphore of `n` hold its permits.
            let permits = parse_node(first).0.permits();
            let holders: Vec<&String> = if let Some(n) = permits {
                queue
                    .iter()
                    .map(|(_, child)| *child)
                    .take(n as usize)
                    .collect()
            } else if is_reader(first) {
                queue
                    .iter()
                    .map(|(_, child)| *child)
                    .take_while(|child| is_reader(child))
                    .collect()
            } else {
                vec![first]
            };
            let mut found = Vec::with_capacity(holders.len());
            for child in &holders {
                let path = format!("{parent}/{child}");
                match self.call("get", client.get_data(&path)).await {
                    Ok((data, stat)) => found.push((path, token_of(child), data, stat)),
                    // Released in between: look again.
                    Err(ZkFailure::Server(zk::Error::NoNode)) => continue 'look,
                    Err(failure) => return Err(self.failed("get", failure)),
                }
            }
            let holder_of = |data: &[u8], stat: &zk::Stat| {
                let data = String::from_utf8_lossy(data);
                let record = data
                    .lines()
                    .find_map(|line| line.strip_prefix("holder="))
                    .unwrap_or_default()
                    .to_owned();
                holder_from_record(&record, u64::try_from(stat.ctime).ok())
            };
            let waiters = Some((queue.len() - holders.len()) as u64);
            let entry = if permits.is_some() || is_reader(first) {
                let tokens = found.iter().map(|f| f.1.to_owned()).collect();
                Entry {
                    permits,
                    ..Entry::read_by(name, tokens, waiters)
                }
            } else {
                let (_, token, data, stat) = &found[0];
                Entry {
                    name: name.to_owned(),
                    token: Some((*token).to_owned()),
                    holder: holder_of(data, stat),
                    ttl: None,
                    fencing_token: u64::try_from(stat.czxid).ok(),
                    waiters,
                    readers: Vec::new(),
                    permits: None,
                }
            };
            return Ok(Some((entry, found.into_iter().map(|f| f.0).collect())));
        }
        Err("the lock changed hands five times while being looked at; try again".into())
    }

    /// `srvr` on the first host: `Zookeeper version: 3.8.4-…` → `ZooKeeper 3.8.4`.
    async fn srvr(&self) -> Option<String> {
        let answer = tokio::time::timeout(self.response_timeout, self.access.srvr())
            .await
            .ok()
            .flatten()?;
        let line = answer
            .lines()
            .find_map(|l| l.strip_prefix("Zookeeper version: "))?;
        let version = line.split(['-', ',']).next()?.trim();
        Some(format!("ZooKeeper {version}"))
    }
}
