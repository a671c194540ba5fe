//! Results: per-request tallies (latencies, errors by kind), percentiles, and the two output
//! forms — one flat JSON object per run on stdout (for machines and for `table`), and a
//! readable key/value table on stderr.
//!
//! The JSON is written by hand (the crate has no serde_json): values are only integers,
//! floats, strings and null, and objects are flat, so [`parse_line`] can read them back.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

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

/// One JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Int(u64),
    Num(f64),
    Str(String),
    Null,
}

impl std::fmt::Display for Val {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Val::Int(n) => write!(f, "{n}"),
            Val::Num(x) if x.abs() >= 100.0 => write!(f, "{x:.1}"),
            Val::Num(x) => write!(f, "{x:.3}"),
            Val::Str(s) => write!(f, "{s}"),
            Val::Null => write!(f, "-"),
        }
    }
}

/// A run's results, in insertion order.
#[derive(Debug, Default)]
pub struct Report {
    pub fields: Vec<(String, Val)>,
}

impl Report {
    pub fn new(mode: &str) -> Report {
        let mut r = Report::default();
        r.str("mode", mode);
        r
    }

    pub fn int(&mut self, key: &str, v: u64) {
        self.fields.push((key.into(), Val::Int(v)));
    }

    /// A float, rounded to microsecond-ish precision; `None` (or not finite) is `null`.
    pub fn num(&mut self, key: &str, v: Option<f64>) {
        let v = v.filter(|x| x.is_finite()).map_or(Val::Null, |x| Val::Num((x * 1e4).round() / 1e4));
        self.fields.push((key.into(), v));
    }

    pub fn str(&mut self, key: &str, v: &str) {
        self.fields.push((key.into(), Val::Str(v.into())));
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

    pub fn json(&self) -> String {
        let mut out = String::from("{");
        for (i, (k, v)) in self.fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{}:", json_str(k));
            match v {
                Val::Str(s) => out.push_str(&json_str(s)),
                Val::Null => out.push_str("null"),
                Val::Int(n) => {
                    let _ = write!(out, "{n}");
                }
                // Debug keeps the full value and always has a '.' or an exponent.
                Val::Num(x) => {
                    let _ = write!(out, "{x:?}");
                }
            }
        }
        out.push('}');
        out
    }

    /// `key  value` lines, aligned.
    pub fn table(&self) -> String {
        let width = self.fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        self.fields.iter().map(|(k, v)| format!("  {k:<width$}  {v}\n")).collect()
    }
}

fn json_str(s: &str) -> String {
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

/// Reads back one flat JSON object as [`Report::json`] writes it (also accepts `true`,
/// `false` as strings). `None` for anything else.
pub fn parse_line(line: &str) -> Option<Vec<(String, Val)>> {
    let mut chars = line.trim().chars().peekable();
    let mut fields = Vec::new();
    let skip_ws = |c: &mut std::iter::Peekable<std::str::Chars>| {
        while c.next_if(|c| c.is_whitespace()).is_some() {}
    };
    let string = |c: &mut std::iter::Peekable<std::str::Chars>| -> Option<String> {
        (c.next()? == '"').then_some(())?;
        let mut s = String::new();
        loop {
            match c.next()? {
                '"' => return Some(s),
                '\\' => match c.next()? {
                    'n' => s.push('\n'),
                    'u' => {
                        let hex: String = (0..4).filter_map(|_| c.next()).collect();
                        s.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                    }
                    other => s.push(other),
                },
                ch => s.push(ch),
            }
        }
    };
    (chars.next()? == '{').then_some(())?;
    loop {
        skip_ws(&mut chars);
        if chars.next_if_eq(&'}').is_some() {
            return Some(fields);
        }
        let key = string(&mut chars)?;
        skip_ws(&mut chars);
        (chars.next()? == ':').then_some(())?;
        skip_ws(&mut chars);
        let val = if chars.peek() == Some(&'"') {
            Val::Str(string(&mut chars)?)
        } else {
            let raw: String = std::iter::from_fn(|| chars.next_if(|c| !matches!(c, ',' | '}'))).collect();
            match raw.trim() {
                "null" => Val::Null,
                t if t.contains(['.', 'e', 'E', '-']) => Val::Num(t.parse().ok()?),
                t => t.parse().map(Val::Int).or_else(|_| t.parse().map(Val::Num)).unwrap_or(Val::Str(t.into())),
            }
        };
        fields.push((key, val));
        skip_ws(&mut chars);
        chars.next_if_eq(&',');
    }
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
pub fn combined_table(runs: &[Vec<(String, Val)>]) -> String {
    let cells: Vec<Vec<String>> = std::iter::once(COLUMNS.iter().map(|(_, h)| h.to_string()).collect())
        .chain(runs.iter().map(|run| {
            COLUMNS
                .iter()
                .map(|(key, _)| run.iter().find(|(k, _)| k == key).map_or("-".into(), |(_, v)| v.to_string()))
                .collect()
        }))
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
        assert_eq!(back, r.fields.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Vec<_>>(), "{line}");
        let table = combined_table(&[back]);
        assert!(table.lines().nth(1).unwrap().starts_with("pull"), "{table}");
    }
}
