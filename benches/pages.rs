//! Page fetches in a feed of 1,000,000 items: a 50-item page by cursor (its checksum checked)
//! at the start, the middle and the end of the created and the modified views, index and
//! count included.
//! The deepest page should cost no more than 1.5x the first (keyset reads, no OFFSET or
//! COUNT scans over the feed).
//!
//! `cargo bench --bench pages` (the feed is built once, about a minute, and kept under
//! `target/bench-data/`; `SMARTFEEDS_BENCH_ITEMS` sets another size).
//!
//! `SMARTFEEDS_BENCH_STORE=postgres` measures the PostgreSQL store instead, on a private
//! server with PostgreSQL's durable defaults, started for the run and removed after it; the
//! feed is filled straight in SQL (`scratch::fill_feed`, about a minute), stamped as
//! publishes 40 to a millisecond would be.

use criterion::{Criterion, criterion_group};
use feed::service::{PullRequest, Service, system_clock};
use feed::{Entry, Order, OrderBy, Store, View};
use smartfeeds::config::Config;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use store_postgres::PostgresStore;
use store_sqlite::SqliteStore;
use testkit::postgres_server::{TempServer, fill_feed};

const ADMIN: &str = "admin@localhost";

fn items() -> u64 {
    std::env::var("SMARTFEEDS_BENCH_ITEMS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000)
}

fn config() -> Config {
    Config::parse(&format!(
        "admins = [\"{ADMIN}\"]\n[component]\njid = \"feeds.localhost\"\nsecret = \"s\"\n[[feeds]]\nname = \"big\"\n"
    ))
    .unwrap()
}

/// The PostgreSQL store on a fresh private server, its feed filled in SQL.
fn postgres_service(rt: &tokio::runtime::Runtime) -> (TempServer, Service<PostgresStore>) {
    let n = items();
    let server = TempServer::start().unwrap();
    let svc = rt.block_on(async {
        let url = server.create_database().await.unwrap();
        let store = PostgresStore::connect(&url, None).await.unwrap();
        eprintln!("filling a feed of {n} items in PostgreSQL...");
        let started = Instant::now();
        let base = chrono::Utc::now().timestamp_millis() - 86_400_000;
        fill_feed(&url, "big", n, base).await.unwrap();
        eprintln!("filled in {:.1?}", started.elapsed());
        let svc = Service::new(store, Arc::new(config().policy()), system_clock());
        svc.init().await.unwrap();
        svc
    });
    (server, svc)
}

fn sqlite_service(rt: &tokio::runtime::Runtime) -> Service<SqliteStore> {
    let n = items();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("pages-{n}.db"));
    let svc = Service::new(SqliteStore::open(&path, None).unwrap(), Arc::new(config().policy()), system_clock());
    rt.block_on(async {
        svc.init().await.unwrap();
        let have = svc.pull(ADMIN, PullRequest { node: "big".into(), max: Some(0), ..Default::default() }).await.unwrap().count;
        if have < n {
            eprintln!("building a feed of {n} items in {} (once)...", path.display());
            let started = Instant::now();
            // Many publishers at once, so group commit writes them in large batches.
            let tasks: Vec<_> = (0..256u64)
                .map(|w| {
                    let svc = svc.clone();
                    tokio::spawn(async move {
                        let mut i = have + w;
                        while i < n {
                            let entry = Entry {
                                xml: format!(
                                    "<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:x:{i}</id><title>Item {i}</title>\
                                     <author><name>a{}</name></author><content>Some text for item {i}.</content></entry>",
                                    i % 7
                                ),
                                atom_id: Some(format!("urn:x:{i}")),
                                author: Some(format!("a{}", i % 7)),
                                categories: vec![],
                            };
                            svc.publish(ADMIN, "big", Some(format!("item-{i}")), entry).await.unwrap();
                            i += 256;
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            eprintln!("built in {:.1?}", started.elapsed());
        }
    });
    svc
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    match std::env::var("SMARTFEEDS_BENCH_STORE").as_deref() {
        Ok("postgres") => {
            let (server, svc) = postgres_service(&rt);
            measure(c, &rt, &svc, "page50-postgres");
            rt.block_on(svc.store().close());
            drop(server);
        }
        Ok("sqlite") | Err(_) => measure(c, &rt, &sqlite_service(&rt), "page50"),
        Ok(other) => panic!("SMARTFEEDS_BENCH_STORE={other}: sqlite (the default) or postgres"),
    }
}

fn measure<S: Store>(c: &mut Criterion, rt: &tokio::runtime::Runtime, svc: &Service<S>, name: &str) {
    let n = items();
    let mut figures = Vec::new();
    let mut group = c.benchmark_group(name);
    group.measurement_time(Duration::from_secs(4));
    for by in [OrderBy::Created, OrderBy::Modified] {
        let view = View { feed: "big".into(), order: Order { by, descending: false }, filter: Default::default() };
        let node = view.canonical();
        // Every page by cursor, checksum check included: the first one right after the
        // first item.
        for (label, index) in [("start", 1), ("middle", n / 2), ("end", n - 50)] {
            // The cursor of the item just before the wanted page, obtained the way a client would.
            let at =
                |index: u64| PullRequest { node: node.clone(), max: Some(1), index: Some(index), ..Default::default() };
            let cursor = rt.block_on(svc.pull(ADMIN, at(index - 1))).unwrap().last.unwrap().to_string();
            let req = PullRequest {
                node: node.clone(),
                max: Some(50),
                after: Some(format!("cursor:{cursor}")),
                ..Default::default()
            };
            let page = rt.block_on(svc.pull(ADMIN, req.clone())).unwrap();
            assert_eq!(page.items.len(), 50);
            assert_eq!(page.first_index, Some(index));
            assert_eq!(page.count, n);
            let id = format!("{by:?}/{label}");
            group.bench_function(&id, |b| b.iter(|| rt.block_on(svc.pull(ADMIN, req.clone())).unwrap()));
            // A plain timing for the summary table, next to criterion's own report.
            let rounds = 2000;
            let started = Instant::now();
            for _ in 0..rounds {
                rt.block_on(svc.pull(ADMIN, req.clone())).unwrap();
            }
            figures.push((id, started.elapsed() / rounds, cursor));
        }
    }
    group.finish();
    // The cursor shows how many same-millisecond items its checksum covers (its O): a feed
    // filled by many concurrent publishers has dozens per millisecond.
    println!("\n{:<20} {:>12} {:>14}   after cursor", "page of 50", "time", "vs start");
    for chunk in figures.chunks(3) {
        let start = chunk[0].1;
        for (id, t, cursor) in chunk {
            println!("{id:<20} {:>10.1?} {:>13.2}x   {cursor}", t, t.as_secs_f64() / start.as_secs_f64());
        }
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
