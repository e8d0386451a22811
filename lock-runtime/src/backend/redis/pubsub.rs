//! Wake-on-release: one pub/sub connection per client, subscribed to a lock's channel while
//! somebody in this process waits on it, and for a second after (see [`LINGER`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use redis::{RedisError, RedisResult};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// How long a channel stays subscribed after its last local waiter leaves: the next waiter of
/// a contended key (the next task in line, or the next contention) finds it subscribed and
/// costs the server no `SUBSCRIBE`/`UNSUBSCRIBE` pair.
const LINGER: Duration = Duration::from_secs(1);

/// Sleeps until `at`, or forever when there is nothing to wait for.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

use super::RedisBackend;
use crate::notify::{CloseOnDrop, ReleaseHub, ReleaseSubscription};
use crate::runtime::RuntimeBound;

impl RedisBackend {
    /// The live pub/sub subscriber, started on the caller's runtime when needed.
    pub(super) async fn subscriber(&self) -> RedisResult<Arc<Subscriber>> {
        self.subscriber
            .get(Subscriber::is_alive, || self.start_subscriber())
            .await
    }

    async fn start_subscriber(&self) -> RedisResult<Arc<Subscriber>> {
        if let super::Link::Sentinel(sentinels) = &self.link {
            // The master the sentinels name now (a PUBLISH there reaches its subscribers).
            let (master, _) = sentinels
                .connect_master(&self.config, self.settings.connect_timeout)
                .await?;
            let pubsub =
                tokio::time::timeout(self.settings.connect_timeout, master.get_async_pubsub())
                    .await
                    .map_err(|_| {
                        super::sentinel::io_error("pub/sub connection timed out".into())
                    })??;
            return Ok(Subscriber::start(pubsub, self.settings.response_timeout));
        }
        // Any node will do in a cluster (a PUBLISH reaches every node): start with a random
        // one so clients spread out, and move on when one does not answer.
        let start = fastrand::usize(..self.pubsub_nodes.len());
        let mut last_error = None;
        let mut pubsub = None;
        for i in 0..self.pubsub_nodes.len() {
            let node = &self.pubsub_nodes[(start + i) % self.pubsub_nodes.len()];
            match tokio::time::timeout(self.settings.connect_timeout, node.get_async_pubsub()).await
            {
                Ok(Ok(connected)) => {
                    pubsub = Some(connected);
                    break;
                }
                Ok(Err(error)) => last_error = Some(error),
                Err(_) => {
                    last_error = Some(RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "pub/sub connection timed out",
                    )))
                }
            }
        }
        let Some(pubsub) = pubsub else {
            return Err(last_error.expect("at least one node"));
        };
        Ok(Subscriber::start(pubsub, self.settings.response_timeout))
    }
}

/// One pub/sub connection shared by every waiter of a client.
///
/// A command task owns the sink and applies SUBSCRIBE/UNSUBSCRIBE in order (so a key is
/// subscribed whenever anyone waits on it, and for [`LINGER`] after); a reader task turns messages into
/// hub notifications. When the connection or its runtime dies, the hub is closed, which wakes
/// every waiter so it retries and resubscribes through a new subscriber.
pub(super) struct Subscriber {
    hub: Arc<ReleaseHub>,
    commands: mpsc::UnboundedSender<Command>,
    dead: Arc<AtomicBool>,
    runtime: RuntimeBound<()>,
    response_timeout: Duration,
}

enum Command {
    Subscribe(String, oneshot::Sender<RedisResult<()>>),
    Unsubscribe(String),
}

impl Subscriber {
    fn start(pubsub: redis::aio::PubSub, response_timeout: Duration) -> Arc<Subscriber> {
        let (mut sink, mut stream) = pubsub.split();
        let (commands, mut queue) = mpsc::unbounded_channel::<Command>();
        let unsubscribe = commands.clone();
        let hub = ReleaseHub::new(Some(Box::new(move |name: &str| {
            let _ = unsubscribe.send(Command::Unsubscribe(name.to_owned()));
        })));
        let (closer, dead) = CloseOnDrop::new(&hub);
        tokio::spawn(async move {
            let _closer = closer;
            while let Some(message) = stream.next().await {
                let channel = message.get_channel_name();
                // A plain release says `released`; a fair lock's names the next in line.
                match std::str::from_utf8(message.get_payload_bytes()) {
                    Ok("released") | Err(_) => _closer.hub.notify(channel),
                    Ok(next) => _closer.hub.notify_one(channel, next),
                }
            }
            tracing::debug!("distlock: redis pub/sub connection closed");
        });

        let command_dead = Arc::clone(&dead);
        tokio::spawn(async move {
            // Channels subscribed on the server; those nobody waits on are `idle` (since when,
            // oldest first) and are unsubscribed after `LINGER`, in one command.
            let mut subscribed = HashSet::new();
            let mut idle: HashMap<String, Instant> = HashMap::new();
            let mut idle_order: VecDeque<(Instant, String)> = VecDeque::new();
            loop {
                let expiry = idle_order.front().map(|(since, _)| *since + LINGER);
                let command = tokio::select! {
                    command = queue.recv() => match command {
                        Some(command) => command,
                        None => break,
                    },
                    _ = sleep_until_some(expiry) => {
                        let now = Instant::now();
                        let mut expired = Vec::new();
                        while let Some((since, _)) = idle_order.front() {
                            if *since + LINGER > now {
                                break;
                            }
                            let (since, channel) = idle_order.pop_front().expect("front");
                            // Still idle since then (not waited on again meanwhile)?
                            if idle.get(&channel) == Some(&since) {
                                idle.remove(&channel);
                                subscribed.remove(&channel);
                                expired.push(channel);
                            }
                        }
                        if !expired.is_empty() && sink.unsubscribe(&expired).await.is_err() {
                            command_dead.store(true, Ordering::SeqCst);
                        }
                        continue;
                    }
                };
                match command {
                    Command::Subscribe(channel, ack) => {
                        let result = if subscribed.contains(&channel) {
                            // Subscribed all along (maybe idle, lingering): no command needed.
                            idle.remove(&channel);
                            Ok(())
                        } else {
                            let result = sink.subscribe(&channel).await;
                            if result.is_ok() {
                                subscribed.insert(channel);
                            }
                            result
                        };
                        if result.is_err() {
                            command_dead.store(true, Ordering::SeqCst);
                        }
                        let _ = ack.send(result);
                    }
                    Command::Unsubscribe(channel) => {
                        if subscribed.contains(&channel) {
                            let now = Instant::now();
                            idle.insert(channel.clone(), now);
                            idle_order.push_back((now, channel));
                        }
                    }
                }
            }
        });

        Arc::new(Subscriber {
            hub,
            commands,
            dead,
            runtime: RuntimeBound::new(()),
            response_timeout,
        })
    }

    /// Marks it dead and wakes every waiter, which retries and resubscribes through a new
    /// subscriber (the sentinels switched the master).
    pub(super) fn close(&self) {
        self.dead.store(true, Ordering::SeqCst);
        self.hub.close();
    }

    fn is_alive(&self) -> bool {
        !self.dead.load(Ordering::SeqCst) && self.runtime.is_alive()
    }

    /// Registers a waiter (of a fair lock: `token`, woken only when a release names it) and
    /// returns once Redis has confirmed the channel subscription.
    pub(super) async fn subscribe(
        &self,
        name: &str,
        token: Option<&str>,
    ) -> RedisResult<ReleaseSubscription> {
        let subscription = self.hub.subscribe_as(name, token, || {});
        let (ack, confirmed) = oneshot::channel();
        let gone = || {
            RedisError::from(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "pub/sub connection closed",
            ))
        };
        self.commands
            .send(Command::Subscribe(name.to_owned(), ack))
            .map_err(|_| gone())?;
        match tokio::time::timeout(self.response_timeout, confirmed).await {
            Ok(Ok(result)) => result.map(|()| subscription),
            Ok(Err(_)) => Err(gone()),
            Err(_) => {
                self.dead.store(true, Ordering::SeqCst);
                Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "SUBSCRIBE was not confirmed in time",
                )))
            }
        }
    }
}
