//! Row 13: a shared result found (`share`, a call within its share) beside a plain cache
//! `GET` of the same stored value on the same Redis server: what distlock adds to the read a
//! hand-written cache makes (the key's check, the stored form's header and decoding).

use std::time::{Duration, Instant};

use distlock::{LockClient, LockError};
use support::RedisServer;

use crate::record::{Base, Better, at, us};
use crate::{Error, Report, median};

const CALLS: u64 = 500;

pub async fn rows(report: &mut Report, server: &RedisServer) -> Result<(), Error> {
    let client = LockClient::connect(&server.url()).await?;
    let raw_client = redis::Client::open(server.url().as_str())?;
    let mut raw = raw_client.get_multiplexed_async_connection().await?;
    let share = Duration::from_secs(600);
    let shared = || {
        client.lock("report:2026-11").share(share).run(|| async {
            Ok::<_, LockError>((42u64, "a report of a few dozen bytes".to_owned()))
        })
    };
    // The first call computes and stores it; every call after finds it.
    shared().await?;
    let (mut ours, mut gets, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let rounds = if std::env::var_os("DISTLOCK_BENCH_QUICK").is_some() {
        10
    } else {
        30
    };
    for round in 0..rounds {
        let hit = async || -> Result<f64, Error> {
            let start = Instant::now();
            for _ in 0..CALLS {
                let (n, _) = shared().await?;
                assert_eq!(n, 42);
            }
            Ok(start.elapsed().as_secs_f64() * 1e6 / CALLS as f64)
        };
        let mut get = async || -> Result<f64, Error> {
            let start = Instant::now();
            for _ in 0..CALLS {
                let value: Option<Vec<u8>> = redis::cmd("GET")
                    .arg("lock-share:lock:report:2026-11")
                    .query_async(&mut raw)
                    .await?;
                assert!(value.is_some());
            }
            Ok(start.elapsed().as_secs_f64() * 1e6 / CALLS as f64)
        };
        let (x, y) = if round % 2 == 0 {
            let x = hit().await?;
            (x, get().await?)
        } else {
            let y = get().await?;
            (hit().await?, y)
        };
        ours.push(x);
        gets.push(y);
        ratios.push(x / y);
    }
    let (ours, gets, ratio) = (median(&mut ours), median(&mut gets), median(&mut ratios));
    report.row(
        at("redis", "13"),
        "share_hit",
        "a shared result found (`.share(d).run(..)` within its share: one `GET`, the header \
         checked, a 40-byte `(u64, String)` decoded)",
        us(ours),
        Base::with_ratio("a plain cache `GET` of the same value", us(gets), ratio),
        Better::Lower,
    );
    report.field("share_hit_us", ours);
    report.field("share_get_us", gets);
    Ok(())
}
