//! End to end, pushes through disruptions with several instances on one PostgreSQL (SPEC
//! §12): two instances of the real binary on a private PostgreSQL server, behind the XMPP
//! server `SMARTFEEDS_TEST_SERVER` selects, publishers at full speed through both, and two
//! subscribers on two views each. While PostgreSQL is restarted (`pg_ctl restart -m fast`,
//! three times), the pushing instance is SIGKILLed and restarted (three times), or
//! PostgreSQL is down for 10 s, each subscription is checked as its client would check it:
//!
//! - its pushes, first arrivals taken in arrival order, form an unbroken `PreviousCursor`
//!   chain from the empty view on (so they come in commit order, none skipped); a push may
//!   come again only as a repeat of the batch in flight (at most a batch per disruption);
//! - every acknowledged publish was pushed;
//! - pushes pause no longer than the disruption itself plus a few seconds (the survivor
//!   takes over, pushing resumes once PostgreSQL answers).
//!
//! Each test runs its scenario `SMARTFEEDS_SOAK_RUNS` times (default 2) and prints one line
//! of counts per run and a total; `scripts/soak-push-order.sh` runs many.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use store_postgres::push_shards::{BATCH, SHARDS};
use testkit::instances::{http_ready, instance, pushing_pid, put_shared};
use testkit::postgres_server::TempServer;
use testkit::process::free_port;
use testkit::push::{parse_push, subscribe};
use testkit::{Client, Smartfeeds, TestServer, start_selected};
use tokio::sync::watch;

/// What happens while publishes and pushes go on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Disruption {
    /// `pg_ctl restart -m fast`, three times, two seconds apart.
    DatabaseRestarts,
    /// SIGKILL of the instance pushing the feed, and its restart, three times.
    PusherKilled,
    /// PostgreSQL stopped (`-m fast`) for 10 s, then started.
    DatabaseDown,
}

impl Disruption {
    fn times(self) -> usize {
        match self {
            Disruption::DatabaseRestarts | Disruption::PusherKilled => 3,
            Disruption::DatabaseDown => 1,
        }
    }

    /// The longest pause between two pushes a subscriber may see: the outage itself, plus
    /// a few seconds to notice and resume.
    fn longest_pause(self) -> Duration {
        let resume = Duration::from_secs(8);
        match self {
            Disruption::DatabaseDown => DOWN + resume,
            _ => resume,
        }
    }
}

/// How long PostgreSQL stays down in [`Disruption::DatabaseDown`].
const DOWN: Duration = Duration::from_secs(10);
/// Concurrent publishers per instance.
const PUBLISHERS: u32 = 3;
/// Who subscribes to which views of the feed `shared`.
const SUBSCRIBERS: [(&str, [&str; 2]); 2] = [
    ("alice", ["shared?order=created", "shared?order=modified"]),
    ("bob", ["shared?order=modified", "shared?order=created"]),
];

/// One push as it arrived: when, the item, `PreviousCursor`, `LastCursor`.
type Arrival = (Instant, String, Option<String>, String);

/// What one run of a scenario showed, summed over its subscriptions.
#[derive(Default, Debug, Clone, Copy)]
struct Counts {
    /// Pushes whose `PreviousCursor` is not the `LastCursor` of the item first pushed
    /// before them: out of commit order, or something skipped.
    out_of_order: usize,
    /// Acknowledged publishes never pushed.
    lost: usize,
    /// Pushes of an item already pushed.
    duplicates: usize,
    /// Subscriptions with more repeats than a batch per disruption.
    too_many_duplicates: usize,
    /// The longest pause between two pushes to one subscriber.
    longest_pause: Duration,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.out_of_order += o.out_of_order;
        self.lost += o.lost;
        self.duplicates += o.duplicates;
        self.too_many_duplicates += o.too_many_duplicates;
        self.longest_pause = self.longest_pause.max(o.longest_pause);
    }
}

/// Checks one subscription's pushes (see the module docs).
fn check(arrivals: &[Arrival], acked: &HashSet<String>, disruptions: usize) -> Counts {
    let mut seen = HashSet::new();
    let mut counts = Counts::default();
    let mut last: Option<&str> = None;
    for (_, id, previous, cursor) in arrivals {
        if !seen.insert(id.as_str()) {
            counts.duplicates += 1;
            continue;
        }
        if previous.as_deref() != last {
            counts.out_of_order += 1;
        }
        last = Some(cursor);
    }
    counts.lost = acked.iter().filter(|id| !seen.contains(id.as_str())).count();
    counts.too_many_duplicates = usize::from(counts.duplicates > BATCH * disruptions);
    counts.longest_pause = arrivals.windows(2).map(|w| w[1].0 - w[0].0).max().unwrap_or_default();
    counts
}

/// Publishes `PREFIX-0`, `PREFIX-1`, … through the instance on `port` as fast as it answers
/// until `stop`; the ids acknowledged (failures, while an instance or the database is down,
/// are retried with the next id after a moment).
async fn publish_until(port: u16, prefix: String, stop: Arc<AtomicBool>) -> Vec<String> {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let mut acked = Vec::new();
    for i in 0.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let id = format!("{prefix}-{i}");
        match put_shared(&client, port, &id).await {
            Ok(()) => acked.push(id),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    acked
}

/// Every push `conn` gets, by node, until every id of the acknowledged set (once it is
/// known) has come on every node and a second more has passed for late repeats, or 40 s
/// after it is known.
async fn listen(
    mut conn: Client,
    nodes: [&'static str; 2],
    mut acked: watch::Receiver<Option<Arc<HashSet<String>>>>,
) -> Vec<Vec<Arrival>> {
    let mut got: Vec<Vec<Arrival>> = vec![Vec::new(); nodes.len()];
    let (mut known, mut complete): (Option<Instant>, Option<Instant>) = (None, None);
    loop {
        if let Some(m) = conn.next_message(Duration::from_millis(100)).await {
            let p = parse_push(&m);
            let at = nodes.iter().position(|n| *n == p.node).unwrap_or_else(|| panic!("a push for {}", p.node));
            got[at].push((Instant::now(), p.item_id().to_string(), p.previous.clone(), p.last_cursor().to_string()));
        }
        let want = acked.borrow_and_update().clone();
        let Some(want) = want else { continue };
        let known = *known.get_or_insert_with(Instant::now);
        if complete.is_none() && got.iter().all(|r| want.iter().all(|id| r.iter().any(|(_, i, _, _)| i == id))) {
            complete = Some(Instant::now());
        }
        if complete.is_some_and(|c| c.elapsed() > Duration::from_secs(1)) || known.elapsed() > Duration::from_secs(40) {
            return got;
        }
    }
}

/// One run: two instances on a fresh database, subscribers, publishers at full speed, the
/// disruption, then every subscription checked.
async fn run_once(host: &TestServer, pg: &Arc<TempServer>, what: Disruption) -> Counts {
    let url = pg.create_database().await.unwrap_or_else(|e| panic!("{e}"));
    let ports = [free_port(), free_port()];
    let mut instances = [instance(host, &url, ports[0]).await, instance(host, &url, ports[1]).await];
    let (acked_tx, acked_rx) = watch::channel(None);
    let mut listeners = Vec::new();
    for (who, nodes) in SUBSCRIBERS {
        let mut conn = host.login(who).await;
        for node in nodes {
            subscribe(&mut conn, node, &format!("{who}@localhost")).await;
        }
        listeners.push(tokio::spawn(listen(conn, nodes, acked_rx.clone())));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut publishers = Vec::new();
    for (port, name) in ports.iter().zip(["a", "b"]) {
        for k in 0..PUBLISHERS {
            publishers.push(tokio::spawn(publish_until(*port, format!("{name}{k}"), stop.clone())));
        }
    }

    tokio::time::sleep(Duration::from_secs(1)).await;
    for _ in 0..what.times() {
        match what {
            Disruption::DatabaseRestarts => {
                restart(pg, Duration::ZERO).await;
                // Time to resume between restarts, as an operator's restarts would leave.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Disruption::DatabaseDown => restart(pg, DOWN).await,
            Disruption::PusherKilled => {
                let pid = pushing_pid(&url, "shared", SHARDS).await;
                let at = instances.iter().position(|i| i.pid().is_some() && i.pid() == pid);
                let at = at.unwrap_or_else(|| panic!("the pusher ({pid:?}) is one of the instances"));
                let victim: &mut Smartfeeds = &mut instances[at];
                victim.kill();
                tokio::time::sleep(Duration::from_millis(1500)).await;
                // Waits for the XMPP probe: other tasks go on meanwhile.
                tokio::task::block_in_place(|| victim.restart());
                http_ready(victim, ports[at]).await;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut acked = HashSet::new();
    for p in publishers {
        acked.extend(p.await.expect("a publisher"));
    }
    assert!(!acked.is_empty(), "no publish was acknowledged");
    acked_tx.send_replace(Some(Arc::new(acked.clone())));

    let mut counts = Counts::default();
    for (l, (who, nodes)) in listeners.into_iter().zip(SUBSCRIBERS) {
        for (arrivals, node) in l.await.expect("a subscriber").iter().zip(nodes) {
            let c = check(arrivals, &acked, what.times());
            if c.out_of_order + c.lost + c.duplicates > 0 {
                eprintln!("{who} on {node}: {c:?}");
            }
            counts.add(c);
        }
    }
    if counts.out_of_order + counts.lost > 0 {
        for (i, sf) in instances.iter().enumerate() {
            eprintln!("instance {i}:\n{}", sf.log_tail(40));
        }
    }
    counts
}

/// Restarts PostgreSQL as an operator does, down for `down` in between.
async fn restart(pg: &Arc<TempServer>, down: Duration) {
    let pg = pg.clone();
    tokio::task::spawn_blocking(move || pg.restart(down)).await.unwrap().unwrap_or_else(|e| panic!("{e}"));
}

/// Runs the scenario `SMARTFEEDS_SOAK_RUNS` times (default 2), prints the counts, and
/// asserts that no run lost, reordered or repeated more than the batches in flight, and
/// that pushes never paused too long.
async fn scenario(what: Disruption) {
    let runs: usize = std::env::var("SMARTFEEDS_SOAK_RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(2);
    let host = start_selected();
    let pg = Arc::new(
        TempServer::start_with("-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let (mut total, mut failed) = (Counts::default(), 0usize);
    for run in 1..=runs {
        let c = run_once(&host, &pg, what).await;
        let bad = c.out_of_order + c.lost + c.too_many_duplicates > 0 || c.longest_pause > what.longest_pause();
        failed += usize::from(bad);
        eprintln!(
            "push-order {what:?} run {run}: out-of-order {}, lost {}, duplicates {}, longest pause {} ms{}",
            c.out_of_order,
            c.lost,
            c.duplicates,
            c.longest_pause.as_millis(),
            if bad { " FAILED" } else { "" }
        );
        total.add(c);
    }
    eprintln!(
        "push-order {what:?} total: runs {runs}, failed {failed}, out-of-order {}, lost {}, duplicates {}, longest pause {} ms",
        total.out_of_order,
        total.lost,
        total.duplicates,
        total.longest_pause.as_millis()
    );
    assert_eq!(total.out_of_order, 0, "{what:?}: pushes out of commit order or skipped");
    assert_eq!(total.lost, 0, "{what:?}: acknowledged publishes never pushed");
    assert_eq!(total.too_many_duplicates, 0, "{what:?}: more repeats than the batches in flight");
    assert!(
        total.longest_pause <= what.longest_pause(),
        "{what:?}: pushes paused for {:?} (at most {:?})",
        total.longest_pause,
        what.longest_pause()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_keep_commit_order_through_postgresql_restarts() {
    scenario(Disruption::DatabaseRestarts).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_of_a_killed_instance_are_taken_over_in_order_with_none_lost() {
    scenario(Disruption::PusherKilled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_pause_while_postgresql_is_down_and_resume_in_order() {
    scenario(Disruption::DatabaseDown).await;
}
