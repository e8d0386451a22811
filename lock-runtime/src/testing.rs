//! Hooks for distlock's own tests: look at and tamper with `memory://` stores the way a test
//! would with `redis-cli` on a real server. Not part of the public API.

use std::time::Duration;

use crate::backend::memory::MemoryBackend;

fn store(url: &str) -> std::sync::Arc<MemoryBackend> {
    let name = url.strip_prefix("memory://").unwrap_or(url);
    MemoryBackend::named(name.trim_end_matches('/'))
}

/// What the `memory://` store at `url` holds for backend key `name`: token and remaining TTL.
pub fn memory_peek(url: &str, name: &str) -> Option<(String, Duration)> {
    store(url).peek(name)
}

/// The live readers of backend key `name` in the `memory://` store at `url`: each one's token
/// and remaining share, longest first.
pub fn memory_readers(url: &str, name: &str) -> Vec<(String, Duration)> {
    store(url).readers_of(name)
}

/// Sets (`Some((token, ttl))`) or deletes (`None`) backend key `name` behind its holder's back.
pub fn memory_force(url: &str, name: &str, value: Option<(&str, Duration)>) {
    store(url).force(name, value)
}

/// How many waiters stand in the fair queue of backend key `name` in the `memory://` store.
pub fn memory_queued(url: &str, name: &str) -> usize {
    store(url).queued(name)
}

/// Gives every operation on the `memory://` store at `url` a simulated round trip of
/// `min..=max` from now on (`None`: back to none), like a slow network to a server.
pub fn memory_latency(url: &str, latency: Option<(Duration, Duration)>) {
    store(url).set_latency(latency)
}

/// How many tasks of `client` stand in its local queues (one per key: the head asks the
/// store, the others wait behind it in arrival order).
pub fn local_queued(client: &crate::LockClient) -> usize {
    client.renewer().local().queued()
}

/// The owner token `guard` stored in the backend: what a server holds for a lock while this
/// guard owns it.
pub fn owner_token(guard: &crate::LockGuard) -> &str {
    guard.owner_token()
}

/// The Redis Cluster hash slot of `key` (CRC16 of its hash tag, modulo 16384).
#[cfg(feature = "redis")]
pub fn cluster_slot(key: &str) -> u16 {
    crate::backend::redis::cluster_slot(key)
}

/// The ZooKeeper node (under the URL's chroot) whose children queue for lock `name`.
#[cfg(feature = "zookeeper")]
pub fn zookeeper_parent(name: &str) -> String {
    crate::backend::zookeeper::parent_of(name)
}

/// What a ZooKeeper queue node's name says (any layout distlock reads: its own, the one
/// before `-lock-`, Curator's): the side of the lock it asks for, the semaphore limit of a
/// permit's node, and its owner token.
#[cfg(feature = "zookeeper")]
pub fn zookeeper_node(child: &str) -> (crate::LockMode, Option<u16>, &str) {
    let (kind, token) = crate::backend::zookeeper::parse_node(child);
    (crate::LockMode::of(kind), kind.permits(), token)
}

/// The part of lock `name`'s etcd keys after the URL's prefix and before the owner token
/// (`<name>/`, with `/` and `%` encoded).
#[cfg(feature = "etcd")]
pub fn etcd_queue(name: &str) -> String {
    crate::backend::etcd::queue_of(name)
}

#[cfg(feature = "etcd")]
pub use crate::backend::etcd::inspect::{EtcdInspector, EtcdKey};

/// Whether the store of `client` queues its waiters on the server (a ZooKeeper node, an etcd
/// key, a waiting session), serving every kind in arrival order.
pub fn waiters_queue(client: &crate::LockClient) -> bool {
    client.admin_backend().capabilities().queues_waiters
}

/// The key of backend name `name` in a NATS bucket (`$KV.<bucket>.<key>` is its subject).
#[cfg(feature = "nats")]
pub fn nats_key(name: &str) -> String {
    crate::backend::nats::NatsBackend::key_of(name)
}

/// The places of a NATS key's table (readers, permits, a writer's mark, a fair queue) in
/// `value`, a message stamped `stamp_ms` (unix ms) at `revision`: each one's token, kind
/// (`'W'`, `'R'`, `'P'`), whether it holds (not a waiting mark), and its end (unix ms by the
/// server's stamps); `None` for a bare token (a plain lock alone).
#[cfg(feature = "nats")]
pub fn nats_table(
    value: &str,
    stamp_ms: u64,
    revision: u64,
) -> Option<Vec<(String, char, bool, u64)>> {
    crate::backend::nats::table_places(value, stamp_ms, revision)
}
