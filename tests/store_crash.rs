//! Durability under SIGKILL: every write the store acknowledged is on disk after the process
//! dies at a random moment, exactly once, with the feed's counters in step and the database
//! intact.
//!
//! The test runs its own binary again as the child (`current_exe()` filtered to this test,
//! with an environment variable saying "be the child"), so it works the same under
//! `cargo test` and `cargo nextest run`. The child hammers the store from 32 tasks and prints
//! one line per acknowledged write; the parent kills it (SIGKILL on unix) after a random
//! number of acknowledgements or milliseconds, reopens the file and checks. Several rounds
//! run on the same file, so each round also recovers from the previous crash.

use feed::ports::{Range, Scope};
use feed::{Entry, Filter, Key, Order, OrderBy, Store, WriteTx};
use rand::Rng;
use store_sqlite::SqliteStore;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TEST_NAME: &str = "acknowledged_writes_survive_sigkill";
/// Set in the child: the database file to write.
const CHILD_DB: &str = "SMARTFEEDS_CRASH_CHILD_DB";
/// Set in the child: the round number, which makes its item ids unique.
const CHILD_ROUND: &str = "SMARTFEEDS_CRASH_CHILD_ROUND";
const FEED: &str = "crash";
const WRITERS: usize = 32;
const ROUNDS: usize = 5;
/// The child stops by itself after this long, in case the parent is gone.
const CHILD_LIFETIME: Duration = Duration::from_secs(30);

#[test]
fn acknowledged_writes_survive_sigkill() {
    if let Ok(db) = std::env::var(CHILD_DB) {
        let round: usize = std::env::var(CHILD_ROUND).ok().and_then(|r| r.parse().ok()).unwrap_or(0);
        child(Path::new(&db), round);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    let mut acked = Acked::default();
    let mut rng = rand::rng();
    for round in 0..ROUNDS {
        let stop_after_acks = rng.random_range(20..3000);
        let stop_after = Duration::from_millis(rng.random_range(100..700));
        let got = run_child_and_kill(&db, round, stop_after_acks, stop_after);
        eprintln!("round {round}: killed after {} acknowledged writes", got.inserted.len() + got.retracted.len());
        acked.inserted.extend(got.inserted);
        acked.retracted.extend(got.retracted);
        verify(&db, &acked);
    }
}

/// What the child acknowledged: ids inserted, ids retracted.
#[derive(Default)]
struct Acked {
    inserted: Vec<String>,
    retracted: Vec<String>,
}

fn run_child_and_kill(db: &Path, round: usize, stop_after_acks: usize, stop_after: Duration) -> Acked {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_DB, db)
        .env(CHILD_ROUND, round.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = BufReader::new(stdout);
        loop {
            let mut line = String::new();
            match out.read_line(&mut line) {
                // A line cut short by the kill was never acknowledged as complete: skip it.
                Ok(n) if n > 0 && line.ends_with('\n') => {
                    if lines_tx.send(line).is_err() {
                        break;
                    }
                }
                _ => break,
            }
        }
    });
    let mut stderr = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });

    let mut acked = Acked::default();
    let take = |line: &str, acked: &mut Acked| {
        if let Some(id) = line.strip_prefix("ACK ins ") {
            acked.inserted.push(id.trim_end().to_string());
        } else if let Some(id) = line.strip_prefix("ACK del ") {
            acked.retracted.push(id.trim_end().to_string());
        }
    };
    let mut first_ack: Option<Instant> = None;
    let started = Instant::now();
    let mut exited_early = false;
    loop {
        let n = acked.inserted.len() + acked.retracted.len();
        if n >= stop_after_acks || first_ack.is_some_and(|t| t.elapsed() >= stop_after) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the child never got going");
        match lines.recv_timeout(Duration::from_millis(5)) {
            Ok(line) => {
                take(&line, &mut acked);
                if first_ack.is_none() && !acked.inserted.is_empty() {
                    first_ack = Some(Instant::now());
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                exited_early = true;
                break;
            }
        }
    }
    // SIGKILL on unix: no destructor, no flush, no chance to finish the batch in flight.
    let _ = child.kill();
    let status = child.wait().unwrap();
    reader.join().unwrap();
    // Everything the child printed before it died was acknowledged.
    for line in lines.try_iter() {
        take(&line, &mut acked);
    }
    let stderr = errors.join().unwrap();
    assert!(!exited_early, "the child exited by itself ({status}):\n{stderr}");
    acked
}

/// Reopens the store and checks it against what was acknowledged.
fn verify(db: &Path, acked: &Acked) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let store = SqliteStore::open(db, None).unwrap();
        assert_eq!(store.integrity_check().await.unwrap(), "ok");
        let (feed, created, modified, ranks_ok) = store
            .read(|tx| {
                let feed = tx.feed(FEED)?.expect("the feed exists once anything was acknowledged");
                let all = Filter::default();
                let by_c = Scope { feed: feed.id, by: OrderBy::Created, filter: &all };
                let by_m = Scope { feed: feed.id, by: OrderBy::Modified, filter: &all };
                let created = tx.scan(by_c, Range { limit: usize::MAX, ..Range::default() })?;
                let modified = tx.scan(by_m, Range { limit: usize::MAX, ..Range::default() })?;
                assert_eq!(tx.count(by_c)?, created.len() as u64);
                assert_eq!(tx.count(by_m)?, modified.len() as u64);
                // Rank and position agree with the scans in both orders (a sample, plus the ends).
                let mut ok = true;
                for (scope, items) in [(by_c, &created), (by_m, &modified)] {
                    for (i, it) in items.iter().enumerate() {
                        if i % 37 == 0 || i + 1 == items.len() {
                            let k: Key = it.key(scope.by);
                            ok &= tx.rank(scope, k)? == i as u64 && tx.nth(scope, i as u64)? == Some(k);
                        }
                    }
                    ok &= tx.nth(scope, items.len() as u64)?.is_none();
                }
                Ok((feed, created, modified, ok))
            })
            .await
            .unwrap();
        assert!(ranks_ok, "rank and nth agree with the scans");
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for it in &created {
            *seen.entry(it.id.as_str()).or_default() += 1;
        }
        for id in &acked.inserted {
            assert_eq!(seen.get(id.as_str()), Some(&1), "acknowledged item {id} is stored exactly once");
        }
        for id in &acked.retracted {
            let it = created.iter().find(|i| &i.id == id).expect("retracted item is stored");
            assert!(it.is_deleted(), "acknowledged retraction of {id} is stored");
        }
        // Counters in step with the rows: dense created seqs, the last modified seq.
        assert_eq!(feed.items, created.len() as u64, "feed.items counts the items");
        for (i, it) in created.iter().enumerate() {
            assert_eq!(it.created.seq, i as i64 + 1, "created seqs are dense");
        }
        assert_eq!(modified.len(), created.len());
        let last = modified.last().map_or(0, |i| i.modified.seq);
        assert_eq!(feed.last_mseq, last, "last_mseq is the newest modified seq");
        assert!(modified.windows(2).all(|w| w[0].modified < w[1].modified));
        store.close().await;
    });
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The child: 32 tasks writing as fast as group commit lets them, one line per ack.
fn child(db: &Path, round: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    rt.block_on(async {
        let store = SqliteStore::open(db, None).unwrap();
        store
            .write(|tx| {
                if tx.feed(FEED)?.is_none() {
                    tx.create_feed(FEED)?;
                }
                Ok(())
            })
            .await
            .unwrap();
        let deadline = Instant::now() + CHILD_LIFETIME;
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut last: Option<String> = None;
                    let mut i = 0usize;
                    while Instant::now() < deadline {
                        // Every fifth write retracts this task's previous item: updates move
                        // items in modified order and must survive the crash as well.
                        let line = match last.take().filter(|_| i % 5 == 4) {
                            Some(id) => {
                                store.write(move |tx| retract(tx, id)).await.unwrap();
                                format!("ACK del r{round}-w{w}-{}\n", i - 1)
                            }
                            None => {
                                let id = format!("r{round}-w{w}-{i}");
                                let stored = id.clone();
                                store.write(move |tx| insert(tx, stored)).await.unwrap();
                                last = Some(id.clone());
                                format!("ACK ins {id}\n")
                            }
                        };
                        let mut out = std::io::stdout().lock();
                        out.write_all(line.as_bytes()).unwrap();
                        out.flush().unwrap();
                        i += 1;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
}

type WriteResult<T> = Result<T, feed::FeedError>;

fn insert(tx: &mut dyn WriteTx, id: String) -> WriteResult<()> {
    let mut feed = tx.feed(FEED)?.expect("feed");
    let entry = Entry {
        xml: format!("<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:{id}</id></entry>"),
        atom_id: Some(format!("urn:{id}")),
        author: Some("crash".into()),
        categories: vec!["test".into()],
    };
    tx.publish(&mut feed, id, entry, now_ms(), Order::default())?;
    Ok(())
}

fn retract(tx: &mut dyn WriteTx, id: String) -> WriteResult<()> {
    let mut feed = tx.feed(FEED)?.expect("feed");
    tx.retract(&mut feed, &id, now_ms(), Order::default())
}
