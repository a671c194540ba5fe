//! `compare`: the side-by-side table of a benchmark with several services and rounds.
//!
//! Reads JSON lines of earlier runs whose `label` is `HOST/SERVICE` (as
//! `scripts/bench-peers.sh` sets them: `prosody/smartfeeds`, `prosody/mod_pubsub (file)`,
//! …). For each figure it prints, per host and service, the median over the rounds with the
//! lowest and highest run beside it, the errors of all rounds, and for every other service the
//! ratio ours / theirs, where "ours" is the service named `smartfeeds` on the same host.
//! Medians, because on a shared machine a single run can be far off; the spread shows how far.

use serde_json::{Map, Value};

/// The service whose figures are "ours" in the ratios.
pub const OURS: &str = "smartfeeds";

/// One compared figure: runs of `mode` (by prefix: `pull` takes `pull-max-items` too), the
/// JSON key, what it means, and which way is better.
struct Figure {
    mode: &'static str,
    key: &'static str,
    title: &'static str,
    higher_is_better: bool,
}

const FIGURES: [Figure; 9] = [
    Figure { mode: "pull", key: "rate", title: "pull: pages of items per second", higher_is_better: true },
    Figure {
        mode: "pull",
        key: "service_cpu_ms_per_op",
        title: "pull: CPU of the service per page, ms",
        higher_is_better: false,
    },
    Figure { mode: "pull", key: "p99_ms", title: "pull: p99 latency of a page, ms", higher_is_better: false },
    Figure { mode: "publish", key: "rate", title: "publish: items per second", higher_is_better: true },
    Figure { mode: "publish", key: "p99_ms", title: "publish: p99 latency, ms", higher_is_better: false },
    Figure {
        mode: "fanout",
        key: "p50_ms",
        title: "fan-out: ms from a publish to the last subscriber's notification (median publish)",
        higher_is_better: false,
    },
    Figure { mode: "fanout", key: "rate", title: "fan-out: notifications per second", higher_is_better: true },
    Figure {
        mode: "fanout",
        key: "service_rss_mib_before",
        title: "fan-out: resident memory of the service before the first publish, MiB",
        higher_is_better: false,
    },
    Figure {
        mode: "fanout",
        key: "service_rss_mib_after",
        title: "fan-out: resident memory of the service after the last publish, MiB",
        higher_is_better: false,
    },
];

/// The figures of one (host, service) for one figure: values of every round, and errors.
#[derive(Default)]
struct Cell {
    values: Vec<f64>,
    errors: u64,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => None,
        n if n % 2 == 1 => Some(v[n / 2]),
        n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The runs of `mode` (by prefix) for one host and service.
fn runs_of<'a>(
    runs: &'a [Map<String, Value>],
    mode: &'a str,
    host: &'a str,
    service: &'a str,
) -> impl Iterator<Item = &'a Map<String, Value>> {
    runs.iter()
        .filter(move |r| text(r, "mode").starts_with(mode) && text(r, "label").split_once('/') == Some((host, service)))
}

fn text<'a>(run: &'a Map<String, Value>, key: &str) -> &'a str {
    run.get(key).and_then(Value::as_str).unwrap_or("")
}

fn number(run: &Map<String, Value>, key: &str) -> Option<f64> {
    run.get(key).and_then(Value::as_f64)
}

/// Hosts and services in the order they first appear.
fn order_of_appearance(runs: &[Map<String, Value>]) -> Vec<(String, String)> {
    let mut seen: Vec<(String, String)> = Vec::new();
    for run in runs {
        if let Some((host, service)) = text(run, "label").split_once('/') {
            let pair = (host.to_string(), service.to_string());
            if !seen.contains(&pair) {
                seen.push(pair);
            }
        }
    }
    seen
}

fn fmt(x: Option<f64>) -> String {
    match x {
        None => "-".into(),
        Some(x) if x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) if x.abs() >= 10.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.2}"),
    }
}

/// Lays out rows of cells in aligned columns (first two left-aligned).
fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> =
        (0..n).map(|i| rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, &w))| if i < 2 { format!("{c:<w$}") } else { format!("{c:>w$}") })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The whole comparison as text.
pub fn table(runs: &[Map<String, Value>]) -> String {
    let pairs = order_of_appearance(runs);
    let mut out = String::new();
    for f in &FIGURES {
        let cell = |host: &str, service: &str| {
            let mut c = Cell::default();
            for run in runs_of(runs, f.mode, host, service) {
                c.errors += number(run, "errors").unwrap_or(0.0) as u64;
                c.values.extend(number(run, f.key));
            }
            c
        };
        let mut rows = vec![vec![
            "host".to_string(),
            "service".into(),
            "median".into(),
            "min".into(),
            "max".into(),
            "runs".into(),
            "errors".into(),
            "ours/theirs".into(),
        ]];
        for (host, service) in &pairs {
            let c = cell(host, service);
            if c.values.is_empty() {
                continue;
            }
            let ours = median(cell(host, OURS).values);
            let mid = median(c.values.clone());
            let ratio = match (service.as_str(), ours, mid) {
                (OURS, ..) => String::new(),
                (_, Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
                _ => "-".into(),
            };
            let min = c.values.iter().copied().reduce(f64::min);
            let max = c.values.iter().copied().reduce(f64::max);
            rows.push(vec![
                host.clone(),
                service.clone(),
                fmt(mid),
                fmt(min),
                fmt(max),
                c.values.len().to_string(),
                c.errors.to_string(),
                ratio,
            ]);
        }
        if rows.len() > 1 {
            let better = if f.higher_is_better { "higher is better" } else { "lower is better" };
            out.push_str(&format!("\n{} ({better})\n", f.title));
            out.push_str(&columns(&rows));
        }
    }
    out.push_str(&cpu_table(runs, &pairs));
    out
}

/// CPU per request of smartfeeds beside the CPU the server spends on the same requests (its
/// routing; for the server's own pubsub the server's time is the whole service), and the
/// load tool's own (so that a saturated tool shows).
fn cpu_table(runs: &[Map<String, Value>], pairs: &[(String, String)]) -> String {
    let mut rows = vec![vec![
        "host".to_string(),
        "service".into(),
        "mode".into(),
        "service ms/op".into(),
        "server ms/op".into(),
        "service/server".into(),
        "tool ms/op".into(),
    ]];
    for (host, service) in pairs {
        for mode in ["pull", "publish", "fanout"] {
            let of = |key: &str| median(runs_of(runs, mode, host, service).filter_map(|r| number(r, key)).collect());
            let (svc, srv) = (of("service_cpu_ms_per_op"), of("server_cpu_ms_per_op"));
            if svc.is_none() && srv.is_none() {
                continue;
            }
            let ratio = match (svc, srv) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
                _ => "-".into(),
            };
            let tool = of("tool_cpu_ms_per_op");
            rows.push(vec![host.clone(), service.clone(), mode.into(), fmt(svc), fmt(srv), ratio, fmt(tool)]);
        }
    }
    if rows.len() == 1 {
        return String::new();
    }
    format!(
        "\nCPU per operation, ms (median; fan-out: per notification; the server's own pubsub runs inside the server)\n{}",
        columns(&rows)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::parse_line;

    fn run(label: &str, mode: &str, rate: f64, errors: u64) -> Map<String, Value> {
        parse_line(&format!(
            r#"{{"mode":"{mode}","label":"{label}","rate":{rate},"errors":{errors},"service_cpu_ms_per_op":0.1,"server_cpu_ms_per_op":0.4}}"#
        ))
        .unwrap()
    }

    #[test]
    fn medians_spread_and_ratios_against_ours_on_the_same_host() {
        let runs = vec![
            run("prosody/smartfeeds", "pull", 900.0, 0),
            run("prosody/smartfeeds", "pull", 1000.0, 0),
            run("prosody/smartfeeds", "pull", 1200.0, 1),
            run("prosody/mod_pubsub", "pull-max-items", 100.0, 0),
            run("prosody/mod_pubsub", "pull-max-items", 50.0, 0),
            run("prosody/mod_pubsub", "pull-max-items", 400.0, 0),
        ];
        let t = table(&runs);
        // The first line whose leading words are `words`, split into its words.
        let row = |words: &[&str]| -> Vec<&str> {
            t.lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .find(|w| w.starts_with(words))
                .unwrap_or_else(|| panic!("no row {words:?}:\n{t}"))
        };
        assert_eq!(row(&["prosody", "smartfeeds"])[2..7], ["1000", "900", "1200", "3", "1"], "{t}");
        assert_eq!(row(&["prosody", "mod_pubsub"])[2..], ["100", "50.0", "400", "3", "0", "10.00x"], "{t}");
        assert!(t.contains("pull: pages of items per second (higher is better)"), "{t}");
        assert_eq!(
            row(&["prosody", "smartfeeds", "pull"])[3..],
            ["0.10", "0.40", "0.25", "-"],
            "0.1 / 0.4 ms, no tool figure: {t}"
        );
    }

    #[test]
    fn even_counts_take_the_middle_two() {
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }
}
