//! Tests of what is the SQLite store's own: group commit sharing commits, batches in which a
//! failing closure spares the others, panics contained, reopening a file and refusing a newer
//! schema, and close or drop finishing the queue. What every store must do is tested once for
//! all of them, in `tests/store_conformance.rs`.

use super::*;
use feed::ports::{Range, Scope};
use feed::{Change, Entry, Filter, Item, Order, OrderBy};
use std::sync::Mutex as StdMutex;
use std::time::Duration;
use store_sql::batch::Pending;

fn ids(items: &[Item]) -> Vec<&str> {
    items.iter().map(|i| i.id.as_str()).collect()
}

fn temp_store(sink: Option<ChangeSink>) -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("t.db"), sink).unwrap();
    (dir, store)
}

/// A write that publishes the item `id` into feed "f" (created on first use) the core's way.
async fn publish_one(store: &SqliteStore, id: String) -> Result<Item, FeedError> {
    store.write(publishing(id)).await
}

fn publishing(id: String) -> impl FnOnce(&mut dyn WriteTx) -> Result<Item, FeedError> + Send + 'static {
    move |tx| {
        let mut f = match tx.feed("f")? {
            Some(f) => f,
            None => tx.create_feed("f")?,
        };
        let entry = Entry {
            xml: "<entry xmlns='http://www.w3.org/2005/Atom'/>".into(),
            atom_id: None,
            author: None,
            categories: vec![],
        };
        tx.publish(&mut f, id, entry, 1_700_000_000_000, Order::default())
    }
}

async fn count_all(store: &SqliteStore) -> u64 {
    store
        .read(|tx| {
            let f = tx.feed("f")?.expect("feed f");
            Ok(tx.count(Scope { feed: f.id, by: OrderBy::Created, filter: &Filter::default() })?)
        })
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_share_commits() {
    let (_dir, store) = temp_store(None);
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { publish_one(&store, format!("w{i}")).await })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let stats = store.stats();
    assert_eq!(stats.writes, 64);
    assert_eq!(stats.failed_writes, 0);
    assert!(stats.commits < stats.writes, "group commit batches writes: {stats:?}");
    assert!(stats.max_batch > 1, "{stats:?}");
    assert_eq!(count_all(&store).await, 64);
    assert_eq!(store.integrity_check().await.unwrap(), "ok");
}

/// Holds the writer inside a write of its own until `release` is sent: jobs queued meanwhile
/// make up the next batch, whatever the timing.
async fn hold_writer(store: &SqliteStore) -> (tokio::task::JoinHandle<()>, std::sync::mpsc::Sender<()>) {
    let store = store.clone();
    let (started_tx, started_rx) = oneshot::channel();
    let (release, wait) = std::sync::mpsc::channel::<()>();
    let handle = tokio::spawn(async move {
        store
            .write(move |_| {
                let _ = started_tx.send(());
                let _ = wait.recv();
                Ok(())
            })
            .await
            .unwrap();
    });
    started_rx.await.unwrap();
    (handle, release)
}

/// Queues a write directly, in call order, and returns where its answer will come.
fn queue<T, F>(store: &SqliteStore, f: F) -> oneshot::Receiver<Result<T, FeedError>>
where
    T: Send + 'static,
    F: FnOnce(&mut dyn WriteTx) -> Result<T, FeedError> + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    store.inner.writer.submit_now(Job::Write(Box::new(Pending::new(f, tx)))).unwrap();
    rx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_closure_spares_its_batch() {
    let seen: Arc<StdMutex<Vec<Vec<Change>>>> = Arc::default();
    let sink_seen = seen.clone();
    let (_dir, store) = temp_store(Some(Box::new(move |c| sink_seen.lock().unwrap().push(c))));
    publish_one(&store, "first".into()).await.unwrap();
    let before = store.stats();
    let (hold, release) = hold_writer(&store).await;
    let mut answers = Vec::new();
    for i in 0..8i64 {
        answers.push(if i % 3 == 1 {
            queue(&store, move |tx| {
                publishing(format!("bad{i}"))(tx)?;
                Err::<Item, _>(FeedError::BadRequest(format!("no {i}")))
            })
        } else {
            queue(&store, publishing(format!("ok{i}")))
        });
    }
    release.send(()).unwrap();
    hold.await.unwrap();
    let mut results = Vec::new();
    for rx in answers {
        results.push(rx.await.unwrap());
    }
    for (i, r) in results.iter().enumerate() {
        if i % 3 == 1 {
            assert_eq!(r, &Err(FeedError::BadRequest(format!("no {i}"))));
        } else {
            assert!(r.is_ok(), "{i}: {r:?}");
        }
    }
    let after = store.stats();
    assert_eq!(after.commits - before.commits, 2, "the hold, then one batch: {before:?} {after:?}");
    assert_eq!(after.failed_writes - before.failed_writes, 3);
    let items = store
        .read(|tx| {
            let f = tx.feed("f")?.expect("feed");
            let scope = Scope { feed: f.id, by: OrderBy::Created, filter: &Filter::default() };
            Ok(tx.scan(scope, Range { limit: 100, ..Range::default() })?)
        })
        .await
        .unwrap();
    assert_eq!(ids(&items), ["first", "ok0", "ok2", "ok3", "ok5", "ok6"]);
    let seen = seen.lock().unwrap();
    let last = seen.last().unwrap();
    assert_eq!(last.iter().map(|c| c.item.id.as_str()).collect::<Vec<_>>(), ["ok0", "ok2", "ok3", "ok5", "ok6"]);
    assert!(seen.iter().flatten().all(|c| !c.item.id.starts_with("bad")), "a failed closure's changes are dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_closure_is_contained() {
    for store in [temp_store(None).1, SqliteStore::open_in_memory(None).unwrap()] {
        publish_one(&store, "a".into()).await.unwrap();
        let r = store
            .write(|tx| -> Result<(), FeedError> {
                publishing("p".into())(tx)?;
                panic!("boom");
            })
            .await;
        assert_eq!(r, Err(FeedError::Store(StoreError::Backend("internal error".into()))));
        let r = store.read(|_| -> Result<(), FeedError> { panic!("read boom") }).await;
        assert_eq!(r, Err(FeedError::Store(StoreError::Backend("internal error".into()))));
        // The writer and the readers carry on, and the panicking write left nothing.
        publish_one(&store, "b".into()).await.unwrap();
        assert_eq!(count_all(&store).await, 2);
        assert_eq!(store.stats().failed_writes, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_store_reopens_with_its_data_and_refuses_a_newer_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = SqliteStore::open(&path, None).unwrap();
    publish_one(&store, "kept".into()).await.unwrap();
    store.close().await;
    assert_eq!(publish_one(&store, "late".into()).await, Err(FeedError::Store(StoreError::Closed)));
    assert_eq!(store.read(|_| Ok(())).await, Err(FeedError::Store(StoreError::Closed)));
    drop(store);
    let store = SqliteStore::open(&path, None).unwrap();
    assert_eq!(count_all(&store).await, 1);
    let mode: String = store
        .inner
        .clone()
        .on_connection(|c| {
            (
                c.query_row("PRAGMA journal_mode", [], |r| r.get(0)).map_err(|e| crate::codec::store_error(e).into()),
                true,
            )
        })
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    store.close().await;
    drop(store);
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
    drop(conn);
    match SqliteStore::open(&path, None) {
        Err(e) => assert_eq!(e, StoreError::TooNew { found: SCHEMA_VERSION + 1, known: SCHEMA_VERSION }),
        Ok(_) => panic!("a newer schema must be refused"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn close_finishes_queued_writes() {
    let (_dir, store) = temp_store(None);
    publish_one(&store, "a".into()).await.unwrap();
    let (hold, release) = hold_writer(&store).await;
    let answers: Vec<_> = (0..10).map(|i| queue(&store, publishing(format!("q{i}")))).collect();
    let closing = {
        let store = store.clone();
        tokio::spawn(async move { store.close().await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!closing.is_finished(), "close waits for the queue");
    release.send(()).unwrap();
    closing.await.unwrap();
    hold.await.unwrap();
    for rx in answers {
        assert!(rx.await.unwrap().is_ok(), "queued before close, so committed");
    }
    assert_eq!(publish_one(&store, "late".into()).await, Err(FeedError::Store(StoreError::Closed)));
    assert_eq!(store.stats().writes, 12);
}

#[test]
fn dropping_the_last_clone_outside_a_runtime_finishes_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.db");
    let store = SqliteStore::open(&path, None).unwrap();
    // Jobs queued straight on the channel, as if by callers that no longer hold the store.
    let answers: Vec<_> = (0..5)
        .map(|i| {
            let (tx, rx) = oneshot::channel();
            store.inner.writer.submit_now(Job::Write(Box::new(Pending::new(publishing(format!("d{i}")), tx)))).unwrap();
            rx
        })
        .collect();
    drop(store);
    for rx in answers {
        assert!(rx.blocking_recv().unwrap().is_ok());
    }
    let store = SqliteStore::open(&path, None).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    assert_eq!(rt.block_on(count_all(&store)), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_reads_runs_a_few_at_a_time_and_all_are_answered() {
    let (_dir, store) = temp_store(None);
    publish_one(&store, "a".into()).await.unwrap();
    let (now, most) =
        (Arc::new(std::sync::atomic::AtomicUsize::new(0)), Arc::new(std::sync::atomic::AtomicUsize::new(0)));
    let reads: Vec<_> = (0..200)
        .map(|_| {
            let (store, now, most) = (store.clone(), now.clone(), most.clone());
            tokio::spawn(async move {
                store
                    .read(move |tx| {
                        use std::sync::atomic::Ordering::SeqCst;
                        most.fetch_max(now.fetch_add(1, SeqCst) + 1, SeqCst);
                        std::thread::sleep(Duration::from_millis(5));
                        let found = tx.feed("f").map(|f| f.is_some()).map_err(FeedError::from);
                        now.fetch_sub(1, SeqCst);
                        found
                    })
                    .await
            })
        })
        .collect();
    for r in reads {
        assert!(r.await.unwrap().unwrap(), "every read sees the feed");
    }
    let most = most.load(std::sync::atomic::Ordering::SeqCst);
    assert!(most >= 2, "reads run side by side: {most}");
    assert!(most <= pool::Pool::at_once(), "at most {} at once: {most}", pool::Pool::at_once());
}

/// A closure of `steps` for feed "f" the way the core publishes (its row read for update,
/// which the batch keeps): publishes of these ids; "subscribe" subscribes alice to the
/// created view; an id ending in "!" is published and then refused.
fn step(step: &'static str) -> impl FnOnce(&mut dyn WriteTx) -> Result<(), FeedError> + Send + 'static {
    move |tx| {
        let mut f = tx.feed_for_update("f")?.expect("the feed");
        if step == "subscribe" {
            let view = "f?order=created".to_string();
            let sub = feed::ports::Subscription {
                node: view.clone(),
                view,
                jid: "alice@localhost".into(),
                subid: "s".into(),
            };
            return Ok(tx.put_subscription(f.id, &sub)?);
        }
        let id = step.trim_end_matches('!');
        let entry = Entry {
            xml: format!("<entry xmlns='http://www.w3.org/2005/Atom'><id>{id}</id></entry>"),
            atom_id: None,
            author: None,
            categories: vec![],
        };
        tx.publish(&mut f, id.into(), entry, 1_700_000_000_000, Order::default())?;
        if step.ends_with('!') {
            return Err(FeedError::BadRequest("refused after publishing".into()));
        }
        Ok(())
    }
}

/// What a batch keeps for its later closures (the feed's row, the views that follow it) is
/// what they would have read: a closure that fails gives back the row it found, and a
/// subscription made in the batch reaches the publishes after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn what_a_batch_keeps_is_what_its_later_closures_would_read() {
    let seen: Arc<StdMutex<Vec<Change>>> = Arc::default();
    let sink_seen = seen.clone();
    let (_dir, store) = temp_store(Some(Box::new(move |c| sink_seen.lock().unwrap().extend(c))));
    publish_one(&store, "a".into()).await.unwrap();
    let (hold, release) = hold_writer(&store).await;
    let answers: Vec<_> = ["b", "c!", "d", "subscribe", "e"].into_iter().map(|s| queue(&store, step(s))).collect();
    release.send(()).unwrap();
    hold.await.unwrap();
    let mut outcomes = Vec::new();
    for rx in answers {
        outcomes.push(rx.await.unwrap().is_ok());
    }
    assert_eq!(outcomes, [true, false, true, true, true]);
    let stored = store
        .read(|tx| {
            let f = tx.feed("f")?.expect("feed");
            let scope = Scope { feed: f.id, by: OrderBy::Created, filter: &Filter::default() };
            let items = tx.scan(scope, Range { limit: 10, ..Range::default() })?;
            Ok((f.items, items.into_iter().map(|i| (i.id, i.created.seq)).collect::<Vec<_>>()))
        })
        .await
        .unwrap();
    let expected: Vec<(String, i64)> = vec![("a".into(), 1), ("b".into(), 2), ("d".into(), 3), ("e".into(), 4)];
    assert_eq!(stored, (4, expected), "the refused c left no gap in the created seqs");
    let views: Vec<(String, Vec<String>)> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|c| (c.item.id.clone(), c.views.iter().map(|v| v.view.clone()).collect()))
        .collect();
    let none = Vec::<String>::new();
    assert_eq!(
        views,
        [
            ("a".to_string(), none.clone()),
            ("b".to_string(), none.clone()),
            ("d".to_string(), none),
            ("e".to_string(), vec!["f?order=created".to_string()]),
        ]
    );
}
