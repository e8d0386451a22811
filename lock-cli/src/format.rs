//! How locks are printed: tables for people, JSON for scripts.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock_runtime::LockInfo;
use serde_json::{Value, json};

/// `850ms`, `12.3s`, `3m12s`, `2h03m`.
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        if d < Duration::from_millis(10) {
            return format!("{:.2}ms", d.as_secs_f64() * 1e3);
        }
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    if s < 60 {
        return format!("{:.1}s", d.as_secs_f64());
    }
    if s < 3600 {
        return format!("{}m{:02}s", s / 60, s % 60);
    }
    format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
}

/// `2026-11-23 13:22:52 UTC (12.3s ago)`.
pub fn since(time: SystemTime) -> String {
    let ago = SystemTime::now().duration_since(time).map_or_else(
        |_| "in the future: clocks differ".to_owned(),
        |d| format!("{} ago", duration(d)),
    );
    format!("{} ({ago})", utc(time))
}

/// `2026-11-23 13:22:52 UTC`, without a date library (days to civil date: Howard Hinnant's
/// algorithm).
pub fn utc(time: SystemTime) -> String {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        (rest % 3600) / 60,
        rest % 60
    )
}

/// The listing as an aligned table.
pub fn table(locks: &[LockInfo]) -> String {
    let header = [
        "KEY",
        "HOLDER",
        "HELD FOR",
        "LEASE LEFT",
        "FENCE",
        "WAITERS",
    ];
    let rows: Vec<[String; 6]> = locks
        .iter()
        .map(|info| {
            let oldest = info
                .readers
                .iter()
                .filter_map(|r| r.holder.as_ref())
                .min_by_key(|h| h.since);
            let shared = match info.permits {
                Some(n) => format!("{} of {n} permits", info.readers.len()),
                None => format!("{} readers", info.readers.len()),
            };
            let (holder, age) = match info.holder.as_ref().or(oldest) {
                Some(h) if !info.readers.is_empty() => (
                    format!("{shared} ({h}, …)"),
                    SystemTime::now()
                        .duration_since(h.since)
                        .map_or_else(|_| "-".to_owned(), duration),
                ),
                None if !info.readers.is_empty() => (shared, "-".to_owned()),
                Some(h) => (
                    h.to_string(),
                    SystemTime::now()
                        .duration_since(h.since)
                        .map_or_else(|_| "-".to_owned(), duration),
                ),
                None => ("unknown".to_owned(), "-".to_owned()),
            };
            [
                info.key.clone(),
                holder,
                age,
                info.ttl.map_or_else(|| "-".to_owned(), duration),
                info.fencing_token
                    .map_or_else(|| "-".to_owned(), |t| t.to_string()),
                info.waiters
                    .map_or_else(|| "-".to_owned(), |w| w.to_string()),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[&str]| {
        let mut text = String::new();
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  "));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&header);
    for row in &rows {
        line(&row.each_ref().map(String::as_str));
    }
    out
}

/// One lock as a JSON object: `key`, `name`, `mode` (`write` or `read`), `token`, `holder`
/// (`host`, `pid`, `since_unix_ms`, or null), `ttl_ms`, `fencing_token`, `waiters` (null when
/// unknown), `readers` (a read lock's readers, or a semaphore's permits: `token`, `holder`,
/// `ttl_ms` each), `permits` (a semaphore's limit, or null).
pub fn info_json(info: &LockInfo) -> Value {
    let holder_json = |h: &distlock_runtime::Holder| {
        json!({
            "host": h.host,
            "pid": h.pid,
            "since_unix_ms": h.since.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
        })
    };
    let holder = info.holder.as_ref().map(holder_json);
    let readers: Vec<Value> = info
        .readers
        .iter()
        .map(|r| {
            json!({
                "token": r.token,
                "holder": r.holder.as_ref().map(holder_json),
                "ttl_ms": r.ttl.map(|d| d.as_millis() as u64),
            })
        })
        .collect();
    let mode = match info.mode {
        distlock_runtime::LockMode::Read => "read",
        _ => "write",
    };
    json!({
        "key": info.key,
        "name": info.name,
        "token": info.token,
        "holder": holder,
        "ttl_ms": info.ttl.map(|d| d.as_millis() as u64),
        "fencing_token": info.fencing_token,
        "waiters": info.waiters,
        "mode": mode,
        "readers": readers,
        "permits": info.permits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_like_people_write_them() {
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01 00:00:00 UTC");
        assert_eq!(
            utc(UNIX_EPOCH + Duration::from_secs(1_795_440_172)),
            "2026-11-23 13:22:52 UTC"
        );
        assert_eq!(
            utc(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29 00:00:00 UTC"
        );
        assert_eq!(duration(Duration::from_millis(850)), "850ms");
        assert_eq!(duration(Duration::from_millis(12_345)), "12.3s");
        assert_eq!(duration(Duration::from_secs(192)), "3m12s");
        assert_eq!(duration(Duration::from_secs(7_380)), "2h03m");
    }
}
