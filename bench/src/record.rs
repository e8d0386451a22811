//! The benchmark's output: every row a record (store, row id, what, distlock's figure, the
//! baseline's name and figure, the ratio and which way is better, the UTC day of the run, the
//! environment variables of the run and the server's version), printed as it is measured and
//! written to `distlock-bench.json` with the loose numeric fields beside them.
//! `bench/results.py` merges the records into `bench/results.json` and writes BENCHMARKS.md.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use crate::Error;

/// A figure: a value in a unit (`µs`, `ns`, `ms`, `/s`, `commands`, `requests`, `%` …).
#[derive(Clone, Copy, Debug)]
pub struct Fig {
    pub value: f64,
    pub unit: &'static str,
}

pub fn us(value: f64) -> Fig {
    Fig { value, unit: "µs" }
}

pub fn per_s(value: f64) -> Fig {
    Fig { value, unit: "/s" }
}

pub fn ns(value: f64) -> Fig {
    Fig { value, unit: "ns" }
}

pub fn count(value: f64, unit: &'static str) -> Fig {
    Fig { value, unit }
}

/// Which way a ratio (distlock's figure over the baseline's) is better.
#[derive(Clone, Copy, Debug)]
pub enum Better {
    /// Times, CPU, commands: below 1 is better.
    Lower,
    /// Rates: above 1 is better.
    Higher,
}

/// What a row is set against.
pub enum Base {
    /// A baseline of the same run: its name, its figure, and the ratio (a median of per-round
    /// ratios where the rows are interleaved, so not always the figures' quotient).
    Is { name: String, fig: Fig, ratio: f64 },
    /// No baseline, and why.
    No(String),
}

impl Base {
    /// A baseline whose ratio is the quotient of the two figures.
    pub fn quotient(name: impl Into<String>, ours: Fig, fig: Fig) -> Base {
        Base::Is {
            name: name.into(),
            fig,
            ratio: ours.value / fig.value,
        }
    }

    pub fn with_ratio(name: impl Into<String>, fig: Fig, ratio: f64) -> Base {
        Base::Is {
            name: name.into(),
            fig,
            ratio,
        }
    }

    pub fn none(why: impl Into<String>) -> Base {
        Base::No(why.into())
    }
}

/// Where rows go: the store (`redis`, `postgres` …) and the row id (`"7"`, `"7b"`).
#[derive(Clone, Copy)]
pub struct At<'a> {
    pub store: &'a str,
    pub id: &'a str,
}

pub fn at<'a>(store: &'a str, id: &'a str) -> At<'a> {
    At { store, id }
}

struct Record {
    store: String,
    id: String,
    key: String,
    what: String,
    ours: Fig,
    base: Base,
    better: Better,
    server: String,
}

pub struct Report {
    records: Vec<Record>,
    /// Each store's server version, as the server reported it.
    servers: BTreeMap<String, String>,
    fields: String,
}

impl Report {
    pub fn new() -> Report {
        let mut servers = BTreeMap::new();
        servers.insert(
            "memory".to_owned(),
            format!("in-process (distlock {})", env!("CARGO_PKG_VERSION")),
        );
        Report {
            records: Vec::new(),
            servers,
            fields: String::new(),
        }
    }

    /// Whether no row was measured (a profiling run, say).
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The version of `store`'s server for the rows that follow (asked of the server).
    pub fn server(&mut self, store: &str, version: impl Into<String>) {
        let version = version.into();
        println!("{store}: {version}");
        self.servers.insert(store.to_owned(), version);
    }

    /// One row. `key` names it within its store (the JSON field of its figure): a later run's
    /// row of the same store and key replaces it in `bench/results.json`.
    pub fn row(
        &mut self,
        at: At,
        key: impl Into<String>,
        what: impl Into<String>,
        ours: Fig,
        base: Base,
        better: Better,
    ) {
        let (key, what) = (key.into(), what.into());
        let shown = |f: Fig| format!("{:.2} {}", f.value, f.unit);
        let (baseline, ratio) = match &base {
            Base::Is { name, fig, ratio } => {
                let direction = match better {
                    Better::Lower => "lower is better",
                    Better::Higher => "higher is better",
                };
                (
                    format!("{name}: {}", shown(*fig)),
                    format!("{ratio:.3}× ({direction})"),
                )
            }
            Base::No(why) => (format!("— ({why})"), "—".to_owned()),
        };
        println!(
            "{:>4} {:<10} {what}\n       distlock {:<18} baseline {baseline}; ratio {ratio}",
            at.id,
            at.store,
            shown(ours)
        );
        let server = self
            .servers
            .get(at.store)
            .cloned()
            .unwrap_or_else(|| "unknown".to_owned());
        self.records.push(Record {
            store: at.store.to_owned(),
            id: at.id.to_owned(),
            key,
            what,
            ours,
            base,
            better,
            server,
        });
    }

    /// A loose numeric field of the JSON (kept beside the rows for scripts that read them).
    pub fn field(&mut self, name: &str, value: f64) {
        let _ = write!(
            self.fields,
            ",\n  {}: {}",
            json_string(name),
            json_number(value)
        );
    }

    /// Writes the records and fields as JSON to `distlock-bench.json` in the target directory;
    /// returns its path.
    pub fn write(&self) -> Result<PathBuf, Error> {
        let (date, env) = (utc_day(), run_env());
        let mut out = String::from("{\n  \"run\": {");
        let _ = write!(
            out,
            "\"date\": {}, \"env\": {}, \"command\": {}, \"cores\": {}}}",
            json_string(&date),
            json_string(&env),
            json_string(&command(&env)),
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        out.push_str(",\n  \"rows\": [");
        // Each row's place among the rows of its store and id in this run: the generator keeps
        // that order.
        let mut seen: BTreeMap<(&str, &str), u32> = BTreeMap::new();
        for (i, r) in self.records.iter().enumerate() {
            let seq = seen.entry((&r.store, &r.id)).or_default();
            let (baseline, baseline_value, baseline_unit, ratio, why) = match &r.base {
                Base::Is { name, fig, ratio } => (
                    json_string(name),
                    json_number(fig.value),
                    json_string(fig.unit),
                    json_number(*ratio),
                    "null".to_owned(),
                ),
                Base::No(why) => (
                    "null".into(),
                    "null".into(),
                    "null".into(),
                    "null".into(),
                    json_string(why),
                ),
            };
            let better = match r.better {
                Better::Lower => "lower",
                Better::Higher => "higher",
            };
            let _ = write!(
                out,
                "{}\n    {{\"store\": {}, \"id\": {}, \"key\": {}, \"seq\": {seq}, \"what\": {}, \
                 \"value\": {}, \"unit\": {}, \"baseline\": {baseline}, \"baseline_value\": \
                 {baseline_value}, \"baseline_unit\": {baseline_unit}, \"no_baseline\": {why}, \
                 \"ratio\": {ratio}, \"better\": \"{better}\", \"date\": {}, \"env\": {}, \
                 \"command\": {}, \"server\": {}}}",
                if i == 0 { "" } else { "," },
                json_string(&r.store),
                json_string(&r.id),
                json_string(&r.key),
                json_string(&r.what),
                json_number(r.ours.value),
                json_string(r.ours.unit),
                json_string(&date),
                json_string(&env),
                json_string(&command(&env)),
                json_string(&r.server),
            );
            *seq += 1;
        }
        out.push_str("\n  ]");
        out.push_str(&self.fields);
        out.push_str("\n}\n");
        let dir = target_dir();
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("distlock-bench.json");
        std::fs::write(&path, out)?;
        Ok(path)
    }
}

/// The target directory: `$CARGO_TARGET_DIR` when set, else the workspace's `target/`. The
/// JSON goes there, and the peers build under its `peers/`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"),
    }
}

/// The environment variables that chose this run's rows and settings, sorted: every
/// `DISTLOCK_BENCH_*` (but the helper processes' own) and `BENCH_PEER_POOL`.
pub fn run_env() -> String {
    let mut vars: Vec<String> = std::env::vars()
        .filter(|(name, _)| {
            (name.starts_with("DISTLOCK_BENCH_") && name != "DISTLOCK_BENCH_CHILD")
                || name == "BENCH_PEER_POOL"
        })
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    vars.sort();
    vars.join(" ")
}

fn command(env: &str) -> String {
    let run = "cargo run --release -p distlock-bench";
    match env.is_empty() {
        true => run.to_owned(),
        false => format!("{env} {run}"),
    }
}

/// Today's date in UTC, `YYYY-MM-DD`.
pub fn utc_day() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_number(value: f64) -> String {
    match value.is_finite() {
        true => format!("{value:.4}"),
        false => "null".to_owned(),
    }
}
