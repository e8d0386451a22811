//! Two names for sets of features the code asks about in several places:
//! `cfg(network_store)` when some store reached over the network (every one but `memory://`)
//! is built in, `cfg(every_store)` when all of them are.

const STORES: [&str; 6] = ["REDIS", "POSTGRES", "MYSQL", "ZOOKEEPER", "ETCD", "NATS"];

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(network_store)");
    println!("cargo::rustc-check-cfg=cfg(every_store)");
    let built = |store: &&str| std::env::var_os(format!("CARGO_FEATURE_{store}")).is_some();
    if STORES.iter().any(built) {
        println!("cargo::rustc-cfg=network_store");
    }
    if STORES.iter().all(built) {
        println!("cargo::rustc-cfg=every_store");
    }
}
