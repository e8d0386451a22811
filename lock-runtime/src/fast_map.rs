//! The maps on every acquisition's path: keyed by owner tokens (random, ours) and by lock
//! names. They hash with foldhash, seeded per process — hashbrown's own default hasher — rather
//! than the standard library's SipHash-1-3: an etcd lock + release looks a token up about fifteen
//! times, and SipHash over a 60-byte token was 6,000 of the client's 173,000 instructions per
//! pair (`DISTLOCK_BENCH_PAIRS=etcd` under callgrind).

/// A [`HashMap`](std::collections::HashMap) with a fast, per-process seeded hasher.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A [`HashSet`](std::collections::HashSet) with a fast, per-process seeded hasher.
#[cfg_attr(
    not(any(
        feature = "redis",
        feature = "postgres",
        feature = "mysql",
        feature = "zookeeper",
        feature = "etcd"
    )),
    allow(dead_code)
)]
pub(crate) type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
