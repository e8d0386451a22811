//! Row 12, Redis Sentinel and `?replicas=1`: a master, two replicas and three sentinels of the
//! bench's own.
//!
//! - 12a: an uncontended lock + release through `redis+sentinel://` against the same through
//!   `redis://` to the same master (what finding the master through the sentinels costs once
//!   connected: nothing, is the goal, ≤ 1.05×);
//! - 12c (printed before 12b, to read it by): the same through `redis://` against the raw
//!   `SET NX PX` + compare-and-delete on one connection — the client's own cost over the raw
//!   commands, without replicas;
//! - 12b: the same with `?replicas=1` (the grant waits for a replica's acknowledgement)
//!   against the raw floor: `SET NX PX` and `WAIT 1` in one pipeline, then the
//!   compare-and-delete `EVALSHA`, on one connection.
//!
//! Interleaved rounds, medians of the per-round ratios.

use std::time::Instant;

use distlock::LockClient;

use crate::record::{Base, Better, at, us};
use crate::sql::lock_release;
use crate::{Error, RAW_RELEASE, Report, median};
use support::sentinel::SentinelGroup;

/// Runs `a` and `b` (µs per call over `per_round` calls each) in `rounds` interleaved rounds:
/// the medians of each and of the per-round ratios a / b.
async fn interleaved<A, B>(rounds: u64, mut a: A, mut b: B) -> Result<(f64, f64, f64), Error>
where
    A: AsyncFnMut(u64) -> Result<f64, Error>,
    B: AsyncFnMut(u64) -> Result<f64, Error>,
{
    let (mut xs, mut ys, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let (x, y) = if round % 2 == 0 {
            let x = a(round).await?;
            (x, b(round).await?)
        } else {
            let y = b(round).await?;
            (a(round).await?, y)
        };
        xs.push(x);
        ys.push(y);
        ratios.push(x / y);
    }
    Ok((median(&mut xs), median(&mut ys), median(&mut ratios)))
}

pub async fn rows(report: &mut Report) -> Result<(), Error> {
    let group = SentinelGroup::start(2, 3);
    let version = crate::versions::redis(&group.servers[0]).await;
    report.server(
        "sentinel",
        format!("{version} (a master, 2 replicas, 3 sentinels)"),
    );
    let direct = LockClient::connect(&group.servers[0].url()).await?;
    let sentinel = LockClient::connect(&group.url("")).await?;
    let acked = LockClient::connect(&group.url("?replicas=1")).await?;
    let master = redis::Client::open(group.servers[0].url())?;
    let mut raw = master.get_multiplexed_async_connection().await?;
    let release = redis::Script::new(RAW_RELEASE);
    release.load_async(&mut raw).await?;
    for i in 0..300 {
        lock_release(&direct, format!("warm:d:{i}")).await?;
        lock_release(&sentinel, format!("warm:s:{i}")).await?;
        lock_release(&acked, format!("warm:a:{i}")).await?;
    }
    let per_round = 200u64;
    let timed = async |client: &LockClient, label: &str, round: u64| {
        let t = Instant::now();
        for i in 0..per_round {
            lock_release(client, format!("{label}:{round}:{i}")).await?;
        }
        Ok::<_, Error>(t.elapsed().as_secs_f64() * 1e6 / per_round as f64)
    };

    let (s, d, r) = interleaved(
        21,
        async |round| timed(&sentinel, "s", round).await,
        async |round| timed(&direct, "d", round).await,
    )
    .await?;
    report.row(
        at("sentinel", "12a"),
        "sentinel",
        "lock + release through `redis+sentinel://` (manual API, fresh keys)",
        us(s),
        Base::with_ratio("the same through `redis://` to the same master", us(d), r),
        Better::Lower,
    );
    report.field("sentinel_lock_release_us", s);
    report.field("sentinel_vs_direct_ratio", r);

    let token = "t0123456789abcdef0123456789abcdef";
    let (a, f, r) = interleaved(
        21,
        async |round| timed(&acked, "a", round).await,
        async |round| {
            let t = Instant::now();
            for i in 0..per_round {
                let key = format!("raw:{round}:{i}");
                let (set, acks): (redis::Value, i64) = redis::pipe()
                    .cmd("SET")
                    .arg(&key)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .cmd("WAIT")
                    .arg(1)
                    .arg(1_000)
                    .query_async(&mut raw)
                    .await?;
                assert!(set != redis::Value::Nil && acks >= 1, "raw grant of {key}");
                let released: i64 = release.key(&key).arg(token).invoke_async(&mut raw).await?;
                assert_eq!(released, 1);
            }
            Ok(t.elapsed().as_secs_f64() * 1e6 / per_round as f64)
        },
    )
    .await?;
    let (plain, plain_floor, plain_ratio) = interleaved(
        21,
        async |round| timed(&direct, "p", round).await,
        async |round| {
            let t = Instant::now();
            for i in 0..per_round {
                let key = format!("rawp:{round}:{i}");
                let set: redis::Value = redis::cmd("SET")
                    .arg(&key)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query_async(&mut raw)
                    .await?;
                assert!(set != redis::Value::Nil, "raw grant of {key}");
                let released: i64 = release.key(&key).arg(token).invoke_async(&mut raw).await?;
                assert_eq!(released, 1);
            }
            Ok(t.elapsed().as_secs_f64() * 1e6 / per_round as f64)
        },
    )
    .await?;
    report.row(
        at("sentinel", "12c"),
        "plain",
        "lock + release through `redis://` to the master (manual API, fresh keys)",
        us(plain),
        Base::with_ratio(
            "raw `SET NX PX`, then compare-and-delete `EVALSHA`",
            us(plain_floor),
            plain_ratio,
        ),
        Better::Lower,
    );
    report.field("plain_vs_floor_ratio", plain_ratio);
    report.row(
        at("sentinel", "12b"),
        "replicas",
        "lock + release with `?replicas=1` (the grant waits for a replica's acknowledgement)",
        us(a),
        Base::with_ratio(
            "raw `SET NX PX` + `WAIT 1` in one pipeline, then compare-and-delete `EVALSHA`",
            us(f),
            r,
        ),
        Better::Lower,
    );
    report.field("replicas_lock_release_us", a);
    report.field("replicas_floor_us", f);
    report.field("replicas_vs_floor_ratio", r);
    Ok(())
}
