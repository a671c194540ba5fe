//! Group commit: durable writes per second with 1, 8 and 64 concurrent writers on a temp
//! file, and how many commits (fsyncs) each 1,000 writes cost.
//!
//! Run with `cargo bench --bench group_commit`. `SMARTFEEDS_BENCH_SECS` sets the length of one
//! run (default 2) and `SMARTFEEDS_BENCH_REPEATS` the runs per writer count (default 3); the
//! median is reported, since on a shared machine single runs vary a lot.
//!
//! Every write is a real `Store::write` of one new item plus the feed's counters, answered
//! only once its transaction is fsynced (`synchronous=FULL`, WAL), as in production.

use feed::{Entry, FeedError, Order, Store, WriteTx};
use std::time::{Duration, Instant};
use store_sqlite::SqliteStore;

const FEED: &str = "bench";

struct Row {
    writers: usize,
    writes: u64,
    secs: f64,
    commits: u64,
    max_batch: u64,
    p50: Duration,
    p99: Duration,
}

fn insert(tx: &mut dyn WriteTx, id: String, now: i64) -> Result<(), FeedError> {
    let mut feed = match tx.feed(FEED)? {
        Some(f) => f,
        None => tx.create_feed(FEED)?,
    };
    let entry = Entry {
        xml: format!(
            "<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:{id}</id><title>{}</title></entry>",
            "x".repeat(400)
        ),
        atom_id: Some(format!("urn:{id}")),
        author: Some("bench".into()),
        categories: vec!["a".into(), "b".into()],
    };
    tx.publish(&mut feed, id, entry, now, Order::default())?;
    Ok(())
}

async fn run(writers: usize, length: Duration) -> Row {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("bench.db"), None).expect("open");
    // Create the feed first so the measured writes are all alike.
    store.write(|tx| insert(tx, "warmup".into(), 0)).await.expect("warm-up write");
    let before = store.stats();
    let start = Instant::now();
    let deadline = start + length;
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut i = 0u64;
                while Instant::now() < deadline {
                    let id = format!("w{w}-{i}");
                    let now = chrono::Utc::now().timestamp_millis();
                    let t = Instant::now();
                    store.write(move |tx| insert(tx, id, now)).await.expect("write");
                    latencies.push(t.elapsed());
                    i += 1;
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.expect("writer task"));
    }
    let secs = start.elapsed().as_secs_f64();
    let after = store.stats();
    store.close().await;
    latencies.sort();
    let pct = |p: f64| latencies.get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)));
    Row {
        writers,
        writes: after.writes - before.writes,
        secs,
        commits: after.commits - before.commits,
        max_batch: after.max_batch,
        p50: pct(0.50).copied().unwrap_or_default(),
        p99: pct(0.99).copied().unwrap_or_default(),
    }
}

/// The 1-minute load average, to tell a quiet machine's figures from a busy one's.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(String::from))
        .unwrap_or_else(|| "?".into())
}

fn main() {
    let secs: f64 = std::env::var("SMARTFEEDS_BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let repeats: usize = std::env::var("SMARTFEEDS_BENCH_REPEATS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let length = Duration::from_secs_f64(secs);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().expect("runtime");
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("group commit: durable writes (WAL, synchronous=FULL) on a temp file");
    println!("{repeats} runs of {secs} s per writer count, interleaved; the median run is shown");
    println!("{cpus} CPUs, load average {} at start", load());
    println!();
    let counts = [1usize, 8, 64];
    let mut runs: Vec<Vec<Row>> = counts.iter().map(|_| Vec::new()).collect();
    for _ in 0..repeats {
        for (i, &writers) in counts.iter().enumerate() {
            runs[i].push(rt.block_on(run(writers, length)));
        }
    }
    println!(
        "{:>8} {:>9} {:>12} {:>9} {:>16} {:>9} {:>10} {:>10} {:>20}",
        "writers",
        "writes",
        "writes/s",
        "commits",
        "fsyncs/1k writes",
        "max batch",
        "p50",
        "p99",
        "writes/s (all runs)"
    );
    let rate = |r: &Row| r.writes as f64 / r.secs;
    let mut medians = Vec::new();
    for rows in &mut runs {
        rows.sort_by(|a, b| rate(a).total_cmp(&rate(b)));
        let all: Vec<String> = rows.iter().map(|r| format!("{:.0}", rate(r))).collect();
        let row = &rows[rows.len() / 2];
        let per_k = row.commits as f64 * 1000.0 / row.writes.max(1) as f64;
        println!(
            "{:>8} {:>9} {:>12.0} {:>9} {:>16.1} {:>9} {:>10.2?} {:>10.2?} {:>20}",
            row.writers,
            row.writes,
            rate(row),
            row.commits,
            per_k,
            row.max_batch,
            row.p50,
            row.p99,
            all.join(" ")
        );
        medians.push(rate(row));
    }
    let one = medians.first().copied().unwrap_or(0.0);
    let many = medians.last().copied().unwrap_or(0.0);
    println!();
    println!(
        "64 writers / 1 writer: {:.1}x (target >= 10x); load average {} at end",
        many / one.max(f64::MIN_POSITIVE),
        load()
    );
}
