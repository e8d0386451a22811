//! Every store and mode distlock speaks, with what it can do: the table of
//! `distlock::guide::backends` is rendered from here ([`table`]), from the same
//! [`Capabilities`] the engine reads, and a test keeps the page equal to it.

use super::Capabilities;
use crate::Feature;

/// Every store and mode built into this build: its name (as the test suites name their
/// modules), the row's label (as its URL says it), and its capabilities.
pub(crate) fn stores() -> Vec<(&'static str, &'static str, Capabilities)> {
    #[allow(unused_mut)]
    let mut stores = vec![("memory", "`memory://`", super::memory::CAPABILITIES)];
    #[cfg(feature = "redis")]
    {
        use super::redis::{capabilities, redlock};
        stores.extend([
            ("redis", "`redis://`", capabilities("redis", false, false)),
            (
                "cluster",
                "`redis+cluster://`",
                capabilities("redis-cluster", true, false),
            ),
            (
                "sentinel",
                "`redis+sentinel://`",
                capabilities("redis-sentinel", false, true),
            ),
            ("redlock", "`redlock://`", redlock::CAPABILITIES),
        ]);
    }
    #[cfg(feature = "postgres")]
    {
        use super::postgres::{CAPABILITIES, POLLING, advisory};
        stores.extend([
            ("postgres", "`postgres://` (the lock table)", CAPABILITIES),
            (
                "pgbouncer",
                "`postgres://…?pooler=transaction&listen_url=…`",
                CAPABILITIES,
            ),
            (
                "pgbouncer_polling",
                "`postgres://…?pooler=transaction`",
                POLLING,
            ),
            (
                "advisory",
                "`postgres://…?mode=advisory`",
                advisory::CAPABILITIES,
            ),
        ]);
    }
    #[cfg(feature = "mysql")]
    {
        use super::mysql::{CAPABILITIES, named};
        stores.extend([
            ("mysql", "`mysql://` (the lock table)", CAPABILITIES),
            ("named", "`mysql://…?mode=named`", named::CAPABILITIES),
        ]);
    }
    #[cfg(feature = "zookeeper")]
    {
        use super::zookeeper::CAPABILITIES;
        stores.extend([
            ("zookeeper", "`zk://`", CAPABILITIES),
            ("zookeeper_rwlock", "`zk://…?recipe=rwlock`", CAPABILITIES),
        ]);
    }
    #[cfg(feature = "etcd")]
    stores.push(("etcd", "`etcd://`", super::etcd::CAPABILITIES));
    #[cfg(feature = "nats")]
    stores.push(("nats", "`nats://`", super::nats::CAPABILITIES));
    stores
}

/// The table of what each store can do, in Markdown: a row per store and mode, a column per
/// [`Feature`] (shared results with the store's size limit) and per way the stores differ
/// (several keys, `max_hold`, what wakes a waiter, `watch`).
pub fn table() -> String {
    let served = |caps: &Capabilities, feature| match caps.check(feature) {
        Ok(()) => "yes",
        Err(_) => "—",
    };
    let mut out = String::from("| store |");
    for feature in Feature::ALL {
        out.push_str(&format!(" {feature} |"));
    }
    out.push_str(
        " several keys in one request | `max_hold` | a waiter wakes on | `watch` |\n|---|",
    );
    out.push_str(&"---|".repeat(Feature::ALL.len() + 4));
    out.push('\n');
    for (_, store, caps) in stores() {
        let sets = match (caps.sets, caps.sets_of_shares, caps.slot.is_some()) {
            (false, ..) => "one by one, in order",
            (true, true, false) => "all or nothing, every kind",
            (true, true, true) => "all or nothing, keys of one slot",
            (true, false, _) => "all or nothing, plain locks",
        };
        let max_hold = match caps.keeps_alive {
            true => "the client deletes the lock then",
            false => "renewal stops; expires within a lease",
        };
        let share = match caps.shares {
            Ok(usize::MAX) => "yes, no limit".to_owned(),
            Ok(limit) => format!("up to {}", size(limit)),
            Err(_) => "—".to_owned(),
        };
        let wakes = match caps.poll {
            Some(poll) => format!("asking again, every {} → {} ms", poll.first_ms, poll.cap_ms),
            None => caps.wakes.to_owned(),
        };
        let watch = match caps.announces {
            true => "told of each change",
            false => "lists every interval",
        };
        out.push_str(&format!("| {store} |"));
        for feature in Feature::ALL {
            match feature {
                Feature::SharedResults => out.push_str(&format!(" {share} |")),
                _ => out.push_str(&format!(" {} |", served(&caps, feature))),
            }
        }
        out.push_str(&format!(" {sets} | {max_hold} | {wakes} | {watch} |\n"));
    }
    out
}

/// Whether the store named `store` (as the catalog names it: `redis`, `named`, …) serves
/// `feature`, as the test suites ask it of a store they have not connected to.
///
/// # Panics
///
/// On a name no store of this build has.
pub fn store_supports(store: &str, feature: Feature) -> bool {
    let stores = stores();
    let Some((_, _, caps)) = stores.iter().find(|(name, ..)| *name == store) else {
        panic!("no store named `{store}` in this build");
    };
    caps.check(feature).is_ok()
}

/// `bytes` as the table shows a limit: `512 MiB`, `1.5 MiB`, `1000 MB`.
fn size(bytes: usize) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if bytes.is_multiple_of(1_000_000) {
        return format!("{} MB", bytes / 1_000_000);
    }
    // The stores' limits leave a few KiB for the entry around the value: shown rounded.
    let mib = bytes as f64 / MIB;
    match (mib * 10.0).round() / 10.0 {
        rounded if rounded.fract() == 0.0 => format!("{rounded:.0} MiB"),
        rounded => format!("{rounded:.1} MiB"),
    }
}

#[cfg(all(
    test,
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    feature = "zookeeper",
    feature = "etcd"
))]
mod tests {
    use super::*;

    const PAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/guide/backends.md");
    const BEGIN: &str = "<!-- The table below is rendered from each store's `Capabilities` \
                         (lock-runtime/src/backend/catalog.rs); rewrite it with \
                         `DISTLOCK_WRITE_TABLE=1 cargo test -p distlock-runtime --all-features \
                         catalog` -->\n";
    const END: &str = "<!-- end of the rendered table -->";

    /// docs/guide/backends.md holds the table the stores' capabilities render, between its
    /// markers; `DISTLOCK_WRITE_TABLE=1` rewrites it there.
    #[test]
    fn the_guide_holds_the_table_the_capabilities_render() {
        let page = std::fs::read_to_string(PAGE).unwrap();
        let start = page.find(BEGIN).expect("the table's opening marker") + BEGIN.len();
        let end = start + page[start..].find(END).expect("the table's closing marker");
        let rendered = table();
        if std::env::var_os("DISTLOCK_WRITE_TABLE").is_some() {
            let page = format!("{}{rendered}{}", &page[..start], &page[end..]);
            std::fs::write(PAGE, page).unwrap();
            return;
        }
        assert!(
            page[start..end] == rendered,
            "docs/guide/backends.md's table differs from what the stores' capabilities render; \
             rewrite it with `DISTLOCK_WRITE_TABLE=1 cargo test -p distlock-runtime --all-features \
             catalog`, then review the change. Rendered:\n{rendered}"
        );
    }

    #[test]
    fn every_store_and_mode_has_a_row_and_every_feature_a_column() {
        let stores = stores();
        assert_eq!(stores.len(), 15);
        let table = table();
        assert_eq!(table.lines().count(), 2 + stores.len());
        let header = table.lines().next().unwrap();
        for feature in Feature::ALL {
            assert!(
                header.contains(&format!("| {feature} |")),
                "{feature}: {header}"
            );
        }
        assert_eq!(size(512 * 1024 * 1024), "512 MiB");
        assert_eq!(size(1_536 * 1024 - 8 * 1024), "1.5 MiB");
        assert_eq!(size(1_000_000_000), "1000 MB");
    }
}
