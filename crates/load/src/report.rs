//! Results: per-request tallies (latencies, errors by kind), percentiles, and the two output
//! forms — one flat JSON object per run on stdout (for machines and for `table`), and a
//! readable key/value table on stderr.
//!
use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

/// What one worker (or a whole run) saw.
#[derive(Default, Debug)]
pub struct Tally {
    /// Latencies of the successful operations, in microseconds.
    pub lat_us: Vec<u64>,
    /// Failed operations by kind (error condition, "timeout", "short page", …).
    pub errors: BTreeMap<String, u64>,
}

impl Tally {
    pub fn ok(&mut self, latency: Duration) {
        self.lat_us.push(latency.as_micros() as u64);
    }

    pub fn error(&mut self, kind: impl Into<String>) {
        let mut kind: String = kind.into();
        if kind.len() > 120 {
            let cut = (0..=120).rev().find(|&i| kind.is_char_boundary(i)).unwrap_or(0);
            kind.truncate(cut);
        }
        *self.errors.entry(kind).or_default() += 1;
    }

    pub fn merge(&mut self, other: Tally) {
        self.lat_us.extend(other.lat_us);
        for (k, n) in other.errors {
            *self.errors.entry(k).or_default() += n;
        }
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// "kind: n; kind: n", or "" without errors.
    pub fn error_kinds(&self) -> String {
        self.errors.iter().map(|(k, n)| format!("{k}: {n}")).collect::<Vec<_>>().join("; ")
    }
}

/// Latency percentiles in milliseconds (nearest rank).
#[derive(Debug, Default, Clone, Copy)]
pub struct Percentiles {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

pub fn percentiles(lat_us: &mut [u64]) -> Option<Percentiles> {
    if lat_us.is_empty() {
        return None;
    }
    lat_us.sort_unstable();
    let rank = |p: f64| lat_us[((p * lat_us.len() as f64).ceil() as usize).clamp(1, lat_us.len()) - 1] as f64 / 1e3;
    let mean = lat_us.iter().sum::<u64>() as f64 / lat_us.len() as f64 / 1e3;
    Some(Percentiles { p50: rank(0.50), p99: rank(0.99), max: rank(1.0), mean })
}

/// A value as the tables show it: integers as they are, floats to three decimals (one from
/// 100 on), strings bare, `null` as `-`.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Number(n) if n.is_f64() => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if x.abs() >= 100.0 { format!("{x:.1}") } else { format!("{x:.3}") }
        }
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// A run's results, in insertion order.
#[derive(Debug, Default)]
pub struct Report {
    pub fields: Map<String, Value>,
}

impl Report {
    pub fn new(mode: &str) -> Report {
        let mut r = Report::default();
        r.str("mode", mode);
        r
    }

    pub fn int(&mut self, key: &str, v: u64) {
        self.fields.insert(key.into(), v.into());
    }

    /// A float, rounded to microsecond-ish precision; `None` (or not finite) is `null`.
    pub fn num(&mut self, key: &str, v: Option<f64>) {
        let v = v.and_then(|x| serde_json::Number::from_f64((x * 1e4).round() / 1e4));
        self.fields.insert(key.into(), v.map_or(Value::Null, Value::Number));
    }

    pub fn str(&mut self, key: &str, v: &str) {
        self.fields.insert(key.into(), v.into());
    }

    /// The standard fields every mode reports: `ops` done in `elapsed` (the rate), errors
    /// and latency percentiles from `tally`, and CPU seconds of the service, the server and
    /// this tool (in that order in `cpu`), also per operation.
    pub fn standard(&mut self, ops: u64, tally: &mut Tally, elapsed: Duration, cpu: &[Option<f64>]) {
        let secs = elapsed.as_secs_f64();
        let p = percentiles(&mut tally.lat_us);
        self.int("ops", ops);
        self.int("errors", tally.error_count());
        self.num("elapsed_s", Some(secs));
        self.num("rate", (secs > 0.0).then(|| ops as f64 / secs));
        self.num("p50_ms", p.map(|p| p.p50));
        self.num("p99_ms", p.map(|p| p.p99));
        self.num("max_ms", p.map(|p| p.max));
        self.num("mean_ms", p.map(|p| p.mean));
        for (name, used) in ["service", "server", "tool"].iter().zip(cpu) {
            self.num(&format!("{name}_cpu_s"), *used);
            self.num(&format!("{name}_cpu_ms_per_op"), used.filter(|_| ops > 0).map(|s| s * 1e3 / ops as f64));
        }
        self.str("error_kinds", &tally.error_kinds());
    }

    /// The run as one JSON line.
    pub fn json(&self) -> String {
        Value::Object(self.fields.clone()).to_string()
    }

    /// `key  value` lines, aligned.
    pub fn table(&self) -> String {
        let width = self.fields.keys().map(String::len).max().unwrap_or(0);
        self.fields.iter().map(|(k, v)| format!("  {k:<width$}  {}\n", cell(v))).collect()
    }
}

/// Reads back one JSON object as [`Report::json`] writes it; `None` for anything else.
pub fn parse_line(line: &str) -> Option<Map<String, Value>> {
    serde_json::from_str(line).ok()
}

/// The columns of the combined table, in order.
const COLUMNS: [(&str, &str); 12] = [
    ("mode", "mode"),
    ("ops", "ops"),
    ("errors", "errors"),
    ("elapsed_s", "secs"),
    ("rate", "ops/s"),
    ("p50_ms", "p50 ms"),
    ("p99_ms", "p99 ms"),
    ("max_ms", "max ms"),
    ("service_cpu_s", "svc cpu s"),
    ("service_cpu_ms_per_op", "svc ms/op"),
    ("server_cpu_s", "srv cpu s"),
    ("server_cpu_ms_per_op", "srv ms/op"),
];

/// One row per run, the common columns only.
pub fn combined_table(runs: &[Map<String, Value>]) -> String {
    let cells: Vec<Vec<String>> = std::iter::once(COLUMNS.iter().map(|(_, h)| h.to_string()).collect())
        .chain(runs.iter().map(|run| COLUMNS.iter().map(|(key, _)| run.get(*key).map_or("-".into(), cell)).collect()))
        .collect();
    let widths: Vec<usize> = (0..COLUMNS.len()).map(|i| cells.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in &cells {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| if i == 0 { format!("{c:<w$}") } else { format!("{c:>w$}") })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let mut lat: Vec<u64> = (1..=100).map(|ms| ms * 1000).collect();
        let p = percentiles(&mut lat).unwrap();
        assert_eq!((p.p50, p.p99, p.max), (50.0, 99.0, 100.0));
        assert!(percentiles(&mut []).is_none());
    }

    #[test]
    fn json_lines_read_back() {
        let mut r = Report::new("pull");
        r.int("ops", 2000);
        r.num("rate", Some(1234.56789));
        r.num("server_cpu_s", None);
        r.str("error_kinds", "item-not-found: \"x\"\n: 3");
        let line = r.json();
        let back = parse_line(&line).unwrap();
        assert_eq!(back, r.fields, "{line}");
        assert_eq!(back.keys().next().map(String::as_str), Some("mode"), "keys keep their order: {line}");
        let table = combined_table(&[back]);
        assert!(table.lines().nth(1).unwrap().starts_with("pull"), "{table}");
    }
}
