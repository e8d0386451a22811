//! What differs in a Redis Cluster (`redis+cluster://`): connecting through any node, and the
//! hash slot that groups a lock's keys and its batched renewals.

use std::sync::Arc;

use redis::cluster::ClusterClient;

use super::{Link, RedisBackend, RedisSettings};
use crate::error::LockError;
use crate::url::redact_url;

impl RedisBackend {
    /// A Redis Cluster reached through any of `nodes` (`redis://[user:password@]host:port`
    /// each); `shown` is the URL for messages. Connects and loads the scripts on every master.
    pub(crate) async fn connect_cluster(
        nodes: &[String],
        shown: String,
        settings: RedisSettings,
    ) -> Result<Arc<RedisBackend>, LockError> {
        let mut clients = Vec::with_capacity(nodes.len());
        for node in nodes {
            let client = super::open_client(node, settings.tls.as_ref()).map_err(|e| {
                LockError::Config(format!(
                    "invalid node `{}` in Redis Cluster URL {shown}: {e}",
                    redact_url(node)
                ))
            })?;
            clients.push(client);
        }
        let cluster = ClusterClient::builder(nodes.iter().map(String::as_str));
        #[cfg(feature = "tls")]
        let cluster = match &settings.tls {
            Some(tls) => cluster.certs(super::certificates(tls)),
            None => cluster,
        };
        let cluster = cluster
            .connection_timeout(settings.connect_timeout)
            .response_timeout(settings.response_timeout)
            .retries(settings.retries.max(1) * 4)
            .max_retry_wait(200)
            .build()
            .map_err(|e| LockError::Config(format!("invalid Redis Cluster URL {shown}: {e}")))?;
        let backend = Arc::new(RedisBackend::with_link(
            Link::Cluster(cluster),
            clients,
            "redis-cluster",
            shown,
            settings,
        ));
        backend.check().await?;
        Ok(backend)
    }
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag, modulo 16384.
pub(crate) fn cluster_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &bytes[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    let mut crc: u16 = 0;
    for &byte in tagged.unwrap_or(bytes) {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::cluster_slot;

    #[test]
    fn slots_match_redis_cluster() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(cluster_slot("foo"), 12182);
        assert_eq!(cluster_slot("{user1000}.following"), 3443);
        assert_eq!(cluster_slot("{user1000}.followers"), 3443);
        assert_eq!(cluster_slot("foo{}{bar}"), cluster_slot("foo{}{bar}"));
        assert_eq!(
            cluster_slot("{lock:order:42}"),
            cluster_slot("lock:order:42")
        );
        assert_eq!(
            cluster_slot("lock-fence:{lock:a}b}"),
            cluster_slot("{lock:a}b}")
        );
    }
}
