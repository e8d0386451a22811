//! `distlock bench`: what locks cost on the user's own store — each figure beside the floor the
//! store itself sets, measured in the same run on the same connection
//! ([`LockClient::raw_pair`]: the store's own create and delete, nothing around them).
//!
//! Three measures, on keys starting with `--keys` (the keys are taken and given back; nothing is
//! left behind):
//! - uncontended: `--pairs` acquire + release pairs one after another, alternating with as many
//!   raw pairs: p50 and p99 of each;
//! - throughput: `--tasks` tasks, each on a key of its own, for `--seconds`: pairs per second,
//!   then the raw pairs the same way;
//! - hand-over: four clients (four connections) × four tasks on one key for `--seconds`: grants
//!   per second, and the time from one client's release to another's grant (p50, p99). No raw
//!   floor: the store's own commands do not wait.

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_runtime::{LockClient, LockError};

use crate::measure;

/// What a run measured.
pub(crate) struct Report {
    pub rows: Vec<Row>,
}

/// One figure: distlock's, the raw floor's (if the store has one), and which way is better.
pub(crate) struct Row {
    pub what: &'static str,
    pub unit: Unit,
    pub distlock: f64,
    pub floor: Option<f64>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Milliseconds: lower is better.
    Ms,
    /// Per second: higher is better.
    PerSecond,
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Ms => "ms",
            Unit::PerSecond => "per_s",
        }
    }
}

impl Row {
    /// distlock's figure over the floor's.
    fn ratio(&self) -> Option<f64> {
        self.floor
            .filter(|floor| *floor > 0.0)
            .map(|floor| self.distlock / floor)
    }
}

/// How a run is set up.
pub(crate) struct Setup {
    pub prefix: String,
    pub pairs: usize,
    pub tasks: usize,
    pub window: Duration,
}

/// The percentile `p` (0–1) of `sorted`, in milliseconds.
fn percentile(sorted: &[Duration], p: f64) -> f64 {
    measure::percentile(sorted, p).as_secs_f64() * 1e3
}

/// One acquire + release of `key` through distlock.
async fn pair(client: &LockClient, key: &str) -> Result<(), LockError> {
    let guard = client
        .lock(key)
        .wait(Duration::from_secs(10))
        .acquire()
        .await?;
    guard.release().await
}

/// Runs the three measures, saying on stderr what it measures as it goes (`progress`).
pub(crate) async fn run(
    clients: &[LockClient],
    setup: &Setup,
    progress: impl Fn(&str),
) -> Result<Report, LockError> {
    let client = &clients[0];
    let run_id = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos()
            ^ std::process::id()
    );
    let key = |what: &str, n: usize| format!("{}{run_id}:{what}:{n}", setup.prefix);
    let mut rows = Vec::new();

    // Uncontended, alternating: a slow moment of the machine hits both alike.
    progress(&format!(
        "uncontended: {} pairs of distlock's, {} raw…",
        setup.pairs, setup.pairs
    ));
    let has_floor = client.raw_pair(&key("warm-raw", 0)).await?;
    pair(client, &key("warm", 0)).await?;
    let (mut ours, mut floor) = (Vec::new(), Vec::new());
    for n in 0..setup.pairs {
        let started = Instant::now();
        pair(client, &key("u", n)).await?;
        ours.push(started.elapsed());
        if has_floor {
            let started = Instant::now();
            client.raw_pair(&key("r", n)).await?;
            floor.push(started.elapsed());
        }
    }
    ours.sort();
    floor.sort();
    let floor_of = |p: f64| has_floor.then(|| percentile(&floor, p));
    rows.push(Row {
        what: "uncontended acquire + release, p50",
        unit: Unit::Ms,
        distlock: percentile(&ours, 0.5),
        floor: floor_of(0.5),
    });
    rows.push(Row {
        what: "uncontended acquire + release, p99",
        unit: Unit::Ms,
        distlock: percentile(&ours, 0.99),
        floor: floor_of(0.99),
    });

    // Throughput: each task on a key of its own.
    progress(&format!(
        "throughput: {} tasks on distinct keys for {:?}, then the raw pairs…",
        setup.tasks, setup.window
    ));
    let ours = throughput(client, setup, &key("t", 0), false).await?;
    let floor = if has_floor {
        Some(throughput(client, setup, &key("tr", 0), true).await?)
    } else {
        None
    };
    rows.push(Row {
        what: "throughput, one key per task",
        unit: Unit::PerSecond,
        distlock: ours,
        floor,
    });

    // Hand-over on one key between clients.
    progress(&format!(
        "hand-over: {} clients × 4 tasks on one key for {:?}…",
        clients.len(),
        setup.window
    ));
    let (rate, p50, p99) = handover(clients, setup.window, &key("h", 0)).await?;
    for (what, unit, value) in [
        ("hand-overs per second, one key", Unit::PerSecond, rate),
        ("release → another client's grant, p50", Unit::Ms, p50),
        ("release → another client's grant, p99", Unit::Ms, p99),
    ] {
        rows.push(Row {
            what,
            unit,
            distlock: value,
            floor: None,
        });
    }
    Ok(Report { rows })
}

/// Pairs per second of `setup.tasks` tasks, each on a key of its own, for the window.
async fn throughput(
    client: &LockClient,
    setup: &Setup,
    prefix: &str,
    raw_pairs: bool,
) -> Result<f64, LockError> {
    let tasks = (0..setup.tasks)
        .map(|task| {
            let (client, key) = (client.clone(), Arc::new(format!("{prefix}:{task}")));
            move || {
                let (client, key) = (client.clone(), Arc::clone(&key));
                async move {
                    if raw_pairs {
                        client.raw_pair(&key).await.map(|_| ())
                    } else {
                        pair(&client, &key).await
                    }
                }
            }
        })
        .collect();
    measure::throughput(setup.window, tasks).await
}

/// Four tasks per client contend for `key` for `window`: grants per second, and the p50 and
/// p99 (ms) from a release to the next grant to another client.
async fn handover(
    clients: &[LockClient],
    window: Duration,
    key: &str,
) -> Result<(f64, f64, f64), LockError> {
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for _ in 0..4 {
            let (client, key) = (client.clone(), Arc::new(key.to_owned()));
            tasks.push((c, move || {
                let (client, key) = (client.clone(), Arc::clone(&key));
                async move {
                    let guard = client
                        .lock(key.as_str())
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await?;
                    // Granted, and given back at once: the release is sent now.
                    let granted = Instant::now();
                    guard.release().await?;
                    Ok::<Instant, LockError>(granted)
                }
            }));
        }
    }
    let (rate, p50_us, p99_us) = measure::handoff(window, tasks).await?;
    Ok((rate, p50_us / 1e3, p99_us / 1e3))
}

/// The summary table.
pub(crate) fn table(report: &Report) -> String {
    let figure = |unit: Unit, value: f64| match unit {
        Unit::Ms => format!("{value:.2} ms"),
        Unit::PerSecond => format!("{value:.0}/s"),
    };
    let mut out = format!(
        "{:<40} {:>12} {:>12} {:>8}\n",
        "", "distlock", "raw floor", "ratio"
    );
    for row in &report.rows {
        let floor = row
            .floor
            .map_or_else(|| "—".to_owned(), |f| figure(row.unit, f));
        let ratio = row
            .ratio()
            .map_or_else(|| "—".to_owned(), |r| format!("{r:.2}×"));
        out.push_str(&format!(
            "{:<40} {:>12} {:>12} {:>8}\n",
            row.what,
            figure(row.unit, row.distlock),
            floor,
            ratio
        ));
    }
    out.push_str("(ratio: distlock over the floor; ms: lower is better, /s: higher is better)\n");
    out
}

/// The rows as JSON values.
pub(crate) fn json_rows(report: &Report) -> Vec<serde_json::Value> {
    report
        .rows
        .iter()
        .map(|row| {
            serde_json::json!({
                "what": row.what,
                "unit": row.unit.name(),
                "distlock": row.distlock,
                "floor": row.floor,
                "ratio": row.ratio(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_ratios_read_the_way_the_table_says() {
        let sorted: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&sorted, 0.5), 51.0);
        assert_eq!(percentile(&sorted, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
        let report = Report {
            rows: vec![
                Row {
                    what: "uncontended acquire + release, p50",
                    unit: Unit::Ms,
                    distlock: 0.4,
                    floor: Some(0.2),
                },
                Row {
                    what: "hand-overs per second, one key",
                    unit: Unit::PerSecond,
                    distlock: 2_000.0,
                    floor: None,
                },
            ],
        };
        let table = table(&report);
        assert!(
            table.contains("0.40 ms") && table.contains("0.20 ms"),
            "{table}"
        );
        assert!(table.contains("2.00×"), "{table}");
        assert!(table.contains("2000/s") && table.contains('—'), "{table}");
        assert!(
            table.lines().all(|line| line.chars().count() <= 80),
            "{table}"
        );
        let rows = json_rows(&report);
        assert_eq!(rows[0]["ratio"], 2.0);
        assert!(rows[1]["floor"].is_null() && rows[1]["ratio"].is_null());
        assert_eq!(rows[1]["unit"], "per_s");
    }
}
