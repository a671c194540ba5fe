//! What is the PostgreSQL store's own: migrations under concurrent starts, a schema that is
//! too new, SQLSTATEs from a real server, several processes publishing to one feed, and
//! connections that die between transactions. Behaviours every store shares are in
//! `tests/store_conformance.rs`.

use super::*;
use feed::ports::{Range, Scope};
use feed::{Entry, Filter, Key, Order, OrderBy};
use testkit::postgres_server::TempServer;
use tokio::sync::{mpsc, watch};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

async fn fresh() -> String {
    TempServer::shared().create_database().await.unwrap()
}

/// Two stores on one fresh database, as two processes would be.
async fn two_instances() -> (PostgresStore, PostgresStore) {
    let url = fresh().await;
    (PostgresStore::connect(&url, None).await.unwrap(), PostgresStore::connect(&url, None).await.unwrap())
}

async fn client(url: &str) -> (tokio_postgres::Client, tokio::task::JoinHandle<()>) {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.unwrap();
    (client, tokio::spawn(async move { conn.await.unwrap_or(()) }))
}

fn entry(id: &str) -> Entry {
    Entry {
        xml: format!("<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:{id}</id></entry>"),
        atom_id: Some(format!("urn:{id}")),
        author: None,
        categories: vec![],
    }
}

/// Publishes `id` into feed "f" (created on first use) the service's way: under the lock,
/// the feed and the item named to the store first.
async fn publish(store: &PostgresStore, id: String, now: i64) -> Result<feed::Item, FeedError> {
    store
        .write_to("f", &id.clone(), move |tx| {
            let mut f = match tx.feed_for_update("f")? {
                Some(f) => f,
                None => tx.create_feed("f")?,
            };
            tx.publish(&mut f, id.clone(), entry(&id), now, Order::default())
        })
        .await
}

#[test]
fn instances_starting_together_migrate_once_and_a_newer_schema_is_refused() {
    runtime().block_on(async {
        let url = fresh().await;
        let starts: Vec<_> = (0..4)
            .map(|_| {
                let url = url.clone();
                tokio::spawn(async move { PostgresStore::connect(&url, None).await.map(|_| ()) })
            })
            .collect();
        for s in starts {
            s.await.unwrap().unwrap();
        }
        let (c, _task) = client(&url).await;
        let version: i64 = c.query_one("SELECT version FROM smartfeeds_schema", &[]).await.unwrap().get(0);
        assert_eq!(version, SCHEMA_VERSION);
        let rows: i64 = c.query_one("SELECT COUNT(*) FROM smartfeeds_schema", &[]).await.unwrap().get(0);
        assert_eq!(rows, 1);
        c.execute("UPDATE smartfeeds_schema SET version = $1", &[&(SCHEMA_VERSION + 3)]).await.unwrap();
        let err = PostgresStore::connect(&url, None).await.err();
        assert_eq!(err, Some(StoreError::TooNew { found: SCHEMA_VERSION + 3, known: SCHEMA_VERSION }));
        let version: i64 = c.query_one("SELECT version FROM smartfeeds_schema", &[]).await.unwrap().get(0);
        assert_eq!(version, SCHEMA_VERSION + 3, "left alone");
    });
}

#[test]
fn an_upgrade_applies_pending_migrations_atomically() {
    runtime().block_on(async {
        let url = fresh().await;
        let (mut c, _task) = client(&url).await;
        schema::migrate_with(&mut c, &["CREATE TABLE a(x INT)"]).await.unwrap();
        schema::migrate_with(&mut c, &["-", "CREATE TABLE b(y INT)", "INSERT INTO b VALUES (1)"]).await.unwrap();
        let version: i64 = c.query_one("SELECT version FROM smartfeeds_schema", &[]).await.unwrap().get(0);
        assert_eq!(version, 3);
        let err = schema::migrate_with(&mut c, &["-", "-", "-", "CREATE TABLE c(z INT)", "NOT SQL"]).await.unwrap_err();
        assert!(matches!(err, StoreError::Backend(_)), "{err:?}");
        let version: i64 = c.query_one("SELECT version FROM smartfeeds_schema", &[]).await.unwrap().get(0);
        assert_eq!(version, 3);
        let c_exists: bool = c.query_one("SELECT to_regclass('c') IS NOT NULL", &[]).await.unwrap().get(0);
        assert!(!c_exists, "the failed upgrade left nothing");
    });
}

/// A version-3 database keeps its modified-order counts through version 4's rename, both as
/// released (the table called `mcounts`) and as made by the build that already called it
/// `modified_counts` at version 3.
#[test]
fn version_4_keeps_the_counts_of_either_version_3() {
    runtime().block_on(async {
        for name in ["mcounts", "modified_counts"] {
            let url = fresh().await;
            let (mut c, _task) = client(&url).await;
            let v3: Vec<String> = schema::MIGRATIONS[..3].iter().map(|m| m.replace("mcounts", name)).collect();
            let v3: Vec<&str> = v3.iter().map(String::as_str).collect();
            schema::migrate_with(&mut c, &v3).await.unwrap();
            c.batch_execute(&format!(
                "INSERT INTO feeds(id, name) VALUES (1, 'f');
                 INSERT INTO {name}(feed, level, bucket, n) VALUES (1, 1, 0, 7), (1, 2, 0, 7)"
            ))
            .await
            .unwrap();
            schema::migrate(&mut c).await.unwrap();
            let n: i64 = c.query_one("SELECT SUM(n)::BIGINT FROM modified_counts", &[]).await.unwrap().get(0);
            assert_eq!(n, 14, "{name}");
            let old: bool = c.query_one("SELECT to_regclass('mcounts') IS NOT NULL", &[]).await.unwrap().get(0);
            assert!(!old, "{name}");
        }
    });
}

#[test]
fn sqlstates_from_the_server_keep_their_kind() {
    runtime().block_on(async {
        let url = fresh().await;
        let (c, _task) = client(&url).await;
        let raise = |code: &'static str| {
            let c = &c;
            async move {
                let sql = format!("DO $$ BEGIN RAISE EXCEPTION 'test' USING ERRCODE = '{code}'; END $$");
                crate::error::store_error(c.batch_execute(&sql).await.unwrap_err())
            }
        };
        assert!(matches!(raise("53100").await, StoreError::Full(_)));
        assert!(matches!(raise("XX001").await, StoreError::Corrupt(_)));
        assert!(matches!(raise("XX002").await, StoreError::Corrupt(_)));
        for busy in ["40001", "40P01", "55P03", "08006"] {
            assert!(matches!(raise(busy).await, StoreError::Busy(_)), "{busy}");
        }
        assert!(matches!(raise("23505").await, StoreError::Backend(_)));
    });
}

/// Two stores on one database, as two processes would be, publish to one feed at once: every
/// item gets its own created and modified seq, dense, and times never go back in seq order.
#[test]
fn instances_publishing_to_one_feed_take_turns_under_its_lock() {
    runtime().block_on(async {
        let (a, b) = two_instances().await;
        a.write(|tx| Ok(tx.create_feed("f")?)).await.unwrap();
        let writers: Vec<_> = (0..40)
            .map(|i| {
                let store = if i % 2 == 0 { a.clone() } else { b.clone() };
                // Wall clocks that disagree: the feed's clock never goes back anyway.
                let now = 1_000 + (i % 7) * 3;
                tokio::spawn(async move { publish(&store, format!("i{i}"), now).await.unwrap() })
            })
            .collect();
        let mut items = Vec::new();
        for w in writers {
            items.push(w.await.unwrap());
        }
        let (row, scanned) = a
            .read(|tx| {
                let f = tx.feed("f")?.unwrap();
                let all = Filter::default();
                Ok((
                    f.clone(),
                    tx.scan(
                        Scope { feed: f.id, by: OrderBy::Modified, filter: &all },
                        Range { limit: 100, ..Range::default() },
                    )?,
                ))
            })
            .await
            .unwrap();
        assert_eq!((row.items, row.last_mseq), (40, 40));
        let mut cseqs: Vec<i64> = items.iter().map(|i| i.created.seq).collect();
        cseqs.sort();
        assert_eq!(cseqs, (1..=40).collect::<Vec<_>>());
        let mseqs: Vec<i64> = scanned.iter().map(|i| i.modified.seq).collect();
        assert_eq!(mseqs, (1..=40).collect::<Vec<_>>());
        assert!(scanned.windows(2).all(|w| w[0].modified.t <= w[1].modified.t), "times follow seqs");
        a.close().await;
        b.close().await;
    });
}

/// While one instance holds a feed's lock in an open write, another's publish to that feed
/// waits, and is stamped after it: commit order is cursor order.
#[test]
fn a_publish_waits_for_the_feed_locked_by_another_instance() {
    runtime().block_on(async {
        let (a, b) = two_instances().await;
        publish(&a, "first".into(), 10).await.unwrap();
        let (locked_tx, locked_rx) = std::sync::mpsc::channel::<()>();
        let slow = {
            let a = a.clone();
            tokio::spawn(async move {
                a.write(move |tx| {
                    let mut f = tx.feed_for_update("f")?.unwrap();
                    let _ = locked_tx.send(());
                    std::thread::sleep(std::time::Duration::from_millis(300));
                    tx.publish(&mut f, "slow".into(), entry("slow"), 20, Order::default())
                })
                .await
                .unwrap()
            })
        };
        tokio::task::spawn_blocking(move || locked_rx.recv().unwrap()).await.unwrap();
        let fast = publish(&b, "fast".into(), 30).await.unwrap();
        let slow = slow.await.unwrap();
        assert!(fast.modified > slow.modified, "{fast:?} after {slow:?}");
        assert_eq!((slow.modified.seq, fast.modified.seq), (2, 3));
        assert_eq!(fast.modified, Key { t: 30, seq: 3 });
    });
}

/// Connections that the server drops between transactions are replaced: reads and writes go
/// on without an error.
#[test]
fn dropped_connections_are_replaced() {
    runtime().block_on(async {
        let url = fresh().await;
        let store = PostgresStore::connect(&url, None).await.unwrap();
        publish(&store, "a".into(), 10).await.unwrap();
        store.read(|tx| Ok(tx.feed("f")?)).await.unwrap();
        let (c, _task) = client(&url).await;
        let killed: i64 = c
            .query_one(
                "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE application_name = 'smartfeeds' AND pid <> pg_backend_pid() AND datname = current_database()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(killed >= 1);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        publish(&store, "b".into(), 20).await.unwrap();
        let f = store.read(|tx| Ok(tx.feed("f")?)).await.unwrap().unwrap();
        assert_eq!(f.items, 2);
    });
}

/// Two instances each lock one feed and then want the other's: PostgreSQL breaks the
/// deadlock by failing one statement. That closure alone is rolled back and its caller gets
/// `Busy` (try again); the other write commits.
#[test]
fn a_deadlock_between_instances_fails_one_closure_as_busy() {
    runtime().block_on(async {
        let (a, b) = two_instances().await;
        a.write(|tx| Ok((tx.create_feed("f")?, tx.create_feed("g")?))).await.unwrap();
        let (a_locked, a_waits) = std::sync::mpsc::channel::<()>();
        let (b_locked, b_waits) = std::sync::mpsc::channel::<()>();
        let cross = |store: &PostgresStore, first: &'static str, then: &'static str, locked, other| {
            let store = store.clone();
            let (locked, other): (std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>) = (locked, other);
            tokio::spawn(async move {
                store
                    .write(move |tx| {
                        let mut f = tx.feed_for_update(first)?.unwrap();
                        let _ = locked.send(());
                        let _ = other.recv();
                        tx.feed_for_update(then)?;
                        f.last_t += 1;
                        Ok(tx.save_feed(&f)?)
                    })
                    .await
            })
        };
        let one = cross(&a, "f", "g", a_locked, b_waits);
        let two = cross(&b, "g", "f", b_locked, a_waits);
        let outcomes = [one.await.unwrap(), two.await.unwrap()];
        let busy = outcomes.iter().filter(|o| matches!(o, Err(FeedError::Store(StoreError::Busy(_))))).count();
        let ok = outcomes.iter().filter(|o| o.is_ok()).count();
        assert_eq!((busy, ok), (1, 1), "{outcomes:?}");
        let (f, g) = a.read(|tx| Ok((tx.feed("f")?.unwrap(), tx.feed("g")?.unwrap()))).await.unwrap();
        assert_eq!(f.last_t + g.last_t, 1, "only the surviving write is committed");
        // Both writers carry on.
        publish(&a, "x".into(), 5).await.unwrap();
        publish(&b, "y".into(), 6).await.unwrap();
    });
}

/// Subscribes a JID to feed "f" (created on first use) in created order.
async fn subscribe(store: &PostgresStore, jid: &str) {
    let jid = jid.to_string();
    store
        .write(move |tx| {
            let f = match tx.feed_for_update("f")? {
                Some(f) => f,
                None => tx.create_feed("f")?,
            };
            Ok(tx.put_subscription(f.id, &created_view(jid))?)
        })
        .await
        .unwrap();
}

/// `jid`'s subscription to feed "f"'s view in created order.
fn created_view(jid: String) -> feed::ports::Subscription {
    let view = "f?order=created".to_string();
    feed::ports::Subscription { node: view.clone(), view, jid, subid: "s".into() }
}

/// The next thing a relay hands over.
async fn next(rx: &mut mpsc::Receiver<feed::ToPush>) -> feed::ToPush {
    tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("something handed over").expect("open")
}

/// The next change a relay hands over, signing the receipts before it as the link does
/// once it has written the pushes before them.
async fn next_change(rx: &mut mpsc::Receiver<feed::ToPush>) -> feed::Change {
    loop {
        match next(rx).await {
            feed::ToPush::Change(c) => return c,
            feed::ToPush::Receipt(r) => r.sign(),
        }
    }
}

/// The ids of the next `n` changes a relay hands over (receipts signed).
async fn relayed(rx: &mut mpsc::Receiver<feed::ToPush>, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(next_change(rx).await.item.id);
    }
    out
}

/// Signs the receipts handed over so far; panics on a change among them.
fn sign_receipts(rx: &mut mpsc::Receiver<feed::ToPush>) {
    while let Ok(next) = rx.try_recv() {
        match next {
            feed::ToPush::Receipt(r) => r.sign(),
            feed::ToPush::Change(c) => panic!("{} handed over again", c.item.id),
        }
    }
}

/// Rows in the push log.
async fn logged(sql: &tokio_postgres::Client) -> i64 {
    sql.query_one("SELECT count(*) FROM push_log", &[]).await.unwrap().get(0)
}

/// Signs receipts as they come until the push log is empty (within 5 s).
async fn written_out(rx: &mut mpsc::Receiver<feed::ToPush>, sql: &tokio_postgres::Client) {
    let started = std::time::Instant::now();
    while logged(sql).await > 0 {
        sign_receipts(rx);
        assert!(started.elapsed() < Duration::from_secs(5), "written rows leave the log");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn the_relay_hands_each_logged_change_over_once_and_a_fenced_owner_stops_after_one_batch() {
    runtime().block_on(async {
        let url = fresh().await;
        let store = PostgresStore::connect(&url, None).await.unwrap();
        subscribe(&store, "ann@x").await;
        for i in 0..3 {
            publish(&store, format!("i{i}"), 10 + i).await.unwrap();
        }
        // Changes committed before any instance pushes wait in the log.
        let (linked_tx, linked) = watch::channel(true);
        let (tx, mut rx) = mpsc::channel(push_shards::BATCH);
        tokio::spawn(push_shards::Relay::new(&url, tx, linked).unwrap().run());
        assert_eq!(relayed(&mut rx, 3).await, ["i0", "i1", "i2"]);
        // Each with what its view saw: the chain of cursors is in the log too. Handed over
        // at once: the commit's notice wakes the relay (its poll is a second).
        let published = std::time::Instant::now();
        publish(&store, "i3".into(), 20).await.unwrap();
        let c = next_change(&mut rx).await;
        assert!(published.elapsed() < push_shards::TICK / 2, "relayed after {:?}", published.elapsed());
        assert_eq!((c.item.id.as_str(), c.views.len(), c.views[0].count), ("i3", 1, 4));
        let (sql, _task) = client(&url).await;
        let left = || logged(&sql);
        written_out(&mut rx, &sql).await;

        // Another instance takes every shard over (raises the epochs): the old owner finishes
        // the batch in hand (its pushes were written, so its rows go) and lets the shards
        // go; their next owner (here the same relay, after taking them again) goes on.
        sql.execute("UPDATE push_shards SET epoch = epoch + 1", &[]).await.unwrap();
        publish(&store, "i4".into(), 30).await.unwrap();
        assert_eq!(relayed(&mut rx, 1).await, ["i4"], "the batch in hand");
        publish(&store, "i5".into(), 40).await.unwrap();
        assert_eq!(relayed(&mut rx, 1).await, ["i5"], "once: i4 was written, so it is not pushed again");
        written_out(&mut rx, &sql).await;

        // An instance whose link is down owns nothing: changes wait for one that can push.
        linked_tx.send_replace(false);
        tokio::time::sleep(Duration::from_millis(300)).await;
        publish(&store, "i6".into(), 50).await.unwrap();
        tokio::time::sleep(push_shards::TICK * 2).await;
        assert!(rx.try_recv().is_err(), "nothing pushed while the link is down");
        assert_eq!(left().await, 1);
        let owners: i64 = sql
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(owners, 0, "no locks held while the link is down");
        linked_tx.send_replace(true);
        assert_eq!(relayed(&mut rx, 1).await, ["i6"]);
    });
}

#[test]
fn a_logged_change_leaves_the_log_only_once_written_and_comes_again_first_when_it_was_not() {
    runtime().block_on(async {
        let url = fresh().await;
        let store = PostgresStore::connect(&url, None).await.unwrap();
        subscribe(&store, "ann@x").await;
        publish(&store, "i0".into(), 10).await.unwrap();
        publish(&store, "i1".into(), 11).await.unwrap();
        let (_linked_tx, linked) = watch::channel(true);
        let (tx, mut rx) = mpsc::channel(push_shards::BATCH);
        tokio::spawn(push_shards::Relay::new(&url, tx, linked).unwrap().run());
        let (sql, _task) = client(&url).await;

        // The batch is handed over with a receipt behind it; until the link signs it (its
        // pushes were written), the rows stay, and nothing later is handed over.
        assert_eq!(relayed(&mut rx, 2).await, ["i0", "i1"]);
        let feed::ToPush::Receipt(receipt) = next(&mut rx).await else { panic!("a receipt after the batch") };
        publish(&store, "i2".into(), 12).await.unwrap();
        tokio::time::sleep(push_shards::TICK * 2).await;
        assert_eq!(logged(&sql).await, 3, "rows stay while their pushes are not known to be written");
        assert!(rx.try_recv().is_err(), "nothing after an unwritten batch");

        // The link broke before writing it (the receipt goes unsigned): the batch comes again
        // from the log, before anything committed after it.
        drop(receipt);
        assert_eq!(relayed(&mut rx, 3).await, ["i0", "i1", "i2"]);
        written_out(&mut rx, &sql).await;
        publish(&store, "i3".into(), 13).await.unwrap();
        assert_eq!(relayed(&mut rx, 1).await, ["i3"], "the written ones are not handed over again");
    });
}

/// What one publish costs in round trips to the server, its transaction included: BEGIN;
/// the feed's row locked, the item looked up and the views followed over XMPP and WebSub
/// read, in one pipeline; the item's writes (row, counters, modified counts) in another;
/// COMMIT. Each statement was a round trip of its own before, the two kinds of views two
/// reads, and the end of the closure's savepoint one more (11 in all). The next publishes to
/// the same feed in a batch cost none of their own
/// (`a_batch_reads_the_views_that_follow_a_feed_once_until_it_subscribes`).
#[test]
fn a_publish_costs_four_round_trips() {
    runtime().block_on(async {
        let store = PostgresStore::connect(&fresh().await, None).await.unwrap();
        // The feed created, and the statements prepared on the connection.
        for (i, id) in ["first", "warm"].into_iter().enumerate() {
            publish(&store, id.into(), i as i64 + 1).await.unwrap();
        }
        let before = store.round_trips();
        publish(&store, "measured".into(), 10).await.unwrap();
        assert_eq!(store.round_trips() - before, 4);
        let items = store.read(|tx| Ok(tx.feed("f")?.map(|f| f.items))).await.unwrap();
        assert_eq!(items, Some(3), "every publish stored");
    })
}

/// A closure that fails after publishing is rolled back alone, and so is what the batch
/// kept of the feed's row: the next publish in the same batch stamps from the counters the
/// previous successful one left. Both when the closures read their items themselves (each
/// sets its savepoint, and the failed one is rolled back to it) and when the batch read them
/// first (the failed one sent nothing, and its writes are dropped).
#[test]
fn a_failed_closure_leaves_the_batch_the_feed_row_it_found() {
    for named in [false, true] {
        a_failed_closure_in_a_batch(named);
    }
}

fn a_failed_closure_in_a_batch(named: bool) {
    runtime().block_on(async {
        let store = PostgresStore::connect(&fresh().await, None).await.unwrap();
        publish(&store, "a".into(), 1).await.unwrap();
        // The writer held by a slow closure while three more queue up behind it, in order:
        // they run as one batch.
        let s = store.clone();
        let slow = tokio::spawn(async move {
            s.write(|_| {
                std::thread::sleep(std::time::Duration::from_millis(400));
                Ok(())
            })
            .await
        });
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let mut queued = Vec::new();
        for (id, fails) in [("b", false), ("c", true), ("d", false)] {
            let s = store.clone();
            let closure = move |tx: &mut dyn feed::ports::WriteTx| {
                let mut f = tx.feed_for_update("f")?.expect("the feed");
                tx.publish(&mut f, id.into(), entry(id), 2, Order::default())?;
                if fails {
                    return Err(FeedError::BadRequest("refused after publishing".into()));
                }
                Ok(())
            };
            queued.push(tokio::spawn(async move {
                if named { s.write_to("f", id, closure).await } else { s.write(closure).await }
            }));
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        slow.await.unwrap().unwrap();
        let outcomes: Vec<bool> =
            futures::future::join_all(queued).await.into_iter().map(|r| r.unwrap().is_ok()).collect();
        assert_eq!(outcomes, [true, false, true], "named first: {named}");
        let seqs = store
            .read(|tx| {
                let f = tx.feed("f")?.expect("the feed");
                let all = Filter::default();
                let scope = Scope { feed: f.id, by: OrderBy::Created, filter: &all };
                let items = tx.scan(scope, Range { limit: 10, ..Range::default() })?;
                Ok((f.items, items.into_iter().map(|i| (i.id, i.created.seq)).collect::<Vec<_>>()))
            })
            .await
            .unwrap();
        assert_eq!(seqs, (3, vec![("a".into(), 1), ("b".into(), 2), ("d".into(), 3)]), "named first: {named}");
        // The counts the batch wrote once for all its closures (the feed's count of rows,
        // the modified counts) leave the failed one out too.
        let counts = store
            .read(|tx| {
                let f = tx.feed("f")?.expect("the feed");
                let all = Filter::default();
                let scope = Scope { feed: f.id, by: OrderBy::Modified, filter: &all };
                let d = tx.item(f.id, "d")?.expect("d");
                Ok((tx.count(scope)?, tx.rank(scope, d.modified)?, tx.nth(scope, 2)?))
            })
            .await
            .unwrap();
        assert_eq!(counts.0, 3, "named first: {named}");
        assert_eq!(counts.1, 2, "named first: {named}");
        assert!(counts.2.is_some(), "named first: {named}");
    })
}

/// A write that fails once its closure has ended (here: an item row inserted again, which
/// the store's own reads keep the service from doing) fails the whole batch, whether the
/// next closure's first read or the COMMIT carried it: every caller gets an error and
/// nothing of the batch is committed.
#[test]
fn a_write_that_fails_after_its_closure_ended_fails_the_whole_batch() {
    for named in [false, true] {
        runtime().block_on(async {
            let store = PostgresStore::connect(&fresh().await, None).await.unwrap();
            publish(&store, "a".into(), 1).await.unwrap();
            let slow = hold_writer(&store).await;
            let mut queued = Vec::new();
            for step in ["x", "again", "y"] {
                let s = store.clone();
                queued.push(tokio::spawn(async move {
                    if step == "again" {
                        return s
                            .write(|tx| {
                                let f = tx.feed_for_update("f")?.expect("the feed");
                                let a = tx.item(f.id, "a")?.expect("the item");
                                Ok(tx.insert_item(f.id, &a)?)
                            })
                            .await;
                    }
                    let closure = move |tx: &mut dyn feed::ports::WriteTx| {
                        let mut f = tx.feed_for_update("f")?.expect("the feed");
                        tx.publish(&mut f, step.into(), entry(step), 2, Order::default()).map(drop)
                    };
                    if named { s.write_to("f", step, closure).await } else { s.write(closure).await }
                }));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            slow.await.unwrap().unwrap();
            let outcomes: Vec<bool> =
                futures::future::join_all(queued).await.into_iter().map(|r| r.unwrap().is_ok()).collect();
            assert_eq!(outcomes, [false, false, false], "named first: {named}");
            let items = store.read(|tx| Ok(tx.feed("f")?.map(|f| f.items))).await.unwrap();
            assert_eq!(items, Some(1), "nothing of the batch committed (named first: {named})");
            publish(&store, "after".into(), 3).await.expect("the next batch writes");
        });
    }
}

/// A batch reads the feed, the items and the views that follow it once for all its publishes
/// (which then cost no round trip of their own: their writes go out with the COMMIT), and
/// the views again after one of its closures changed subscriptions: a view subscribed within
/// the batch gets the publishes after it.
#[test]
fn a_batch_reads_the_views_that_follow_a_feed_once_until_it_subscribes() {
    runtime().block_on(async {
        let changes = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = changes.clone();
        let sink: ChangeSink = Box::new(move |c: Vec<feed::Change>| seen.lock().unwrap().extend(c));
        let store = PostgresStore::connect(&fresh().await, Some(sink)).await.unwrap();
        publish(&store, "a".into(), 1).await.unwrap();
        // A batch of one empty closure, as the one that holds the writer in `one_batch`.
        let before = store.round_trips();
        store.write(|_| Ok(())).await.unwrap();
        let empty = store.round_trips() - before;

        let before = store.round_trips();
        one_batch(&store, &["b", "c", "d"]).await;
        // BEGIN, the row locked with the items and the views, every write, COMMIT (`empty` is
        // the batch that held the writer).
        assert_eq!(store.round_trips() - before, empty + 4);

        one_batch(&store, &["e", "subscribe", "f"]).await;
        let views: Vec<(String, Vec<String>)> = changes
            .lock()
            .unwrap()
            .iter()
            .map(|c| (c.item.id.clone(), c.views.iter().map(|v| v.view.clone()).collect()))
            .collect();
        let (none, subscribed) = (Vec::<String>::new(), vec!["f?order=created".to_string()]);
        let expected: Vec<(String, Vec<String>)> = ["a", "b", "c", "d", "e", "f"]
            .into_iter()
            .map(|id| (id.to_string(), if id == "f" { subscribed.clone() } else { none.clone() }))
            .collect();
        assert_eq!(views, expected);
    })
}

/// Publishes `id` to the existing `feed` at `now` the service's way: the feed and the item
/// named to the store first.
async fn publish_to(store: &PostgresStore, feed: &'static str, id: String, now: i64) -> Result<(), FeedError> {
    let named = id.clone();
    store
        .write_to(feed, &named, move |tx| {
            let mut f = tx.feed_for_update(feed)?.expect("the feed");
            tx.publish(&mut f, id.clone(), entry(&id), now, Order::default()).map(drop)
        })
        .await
}

/// Holds the store's writer for 400 ms with a closure that sleeps, once it has begun: what
/// is queued meanwhile runs as one batch after it.
async fn hold_writer(store: &PostgresStore) -> tokio::task::JoinHandle<Result<(), FeedError>> {
    let s = store.clone();
    let slow = tokio::spawn(async move {
        s.write(|_| {
            std::thread::sleep(Duration::from_millis(400));
            Ok(())
        })
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    slow
}

/// A batch's feeds are locked, and their items and views read, in one round trip however
/// many feeds it names: a batch of publishes to three feeds costs what one to a single feed
/// does.
#[test]
fn a_batch_over_several_feeds_reads_them_all_at_once() {
    runtime().block_on(async {
        let store = PostgresStore::connect(&fresh().await, None).await.unwrap();
        for feed in ["a", "b", "c"] {
            store.write(move |tx| tx.create_feed(feed).map(drop).map_err(Into::into)).await.unwrap();
        }
        let before = store.round_trips();
        store.write(|_| Ok(())).await.unwrap();
        let empty = store.round_trips() - before;
        let before = store.round_trips();
        let slow = hold_writer(&store).await;
        let mut queued = Vec::new();
        for feed in ["c", "a", "b", "a"] {
            let (s, id) = (store.clone(), format!("{feed}-{}", queued.len()));
            queued.push(tokio::spawn(async move { publish_to(&s, feed, id, 5).await }));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        slow.await.unwrap().unwrap();
        for q in queued {
            q.await.unwrap().expect("every publish succeeds");
        }
        // The batch that held the writer; then BEGIN, the locks with the items and the views,
        // the writes, COMMIT.
        assert_eq!(store.round_trips() - before, empty + 4);
        let items =
            store.read(|tx| Ok(["a", "b", "c"].map(|f| tx.feed(f).ok().flatten().map(|f| f.items)))).await.unwrap();
        assert_eq!(items, [Some(2), Some(1), Some(1)]);
    })
}

/// A batch does not wait for a feed another instance holds when it has others to write: it
/// commits those, and the put-off publishes come in its next batch, which waits for the
/// feed. Here instance one holds feed "a" for 600 ms; instance two's batch of publishes to
/// "a" and "b" commits "b" meanwhile, and "a" once one lets go.
#[test]
fn a_batch_writes_the_feeds_it_can_while_another_instance_holds_one() {
    runtime().block_on(async {
        let (one, two) = two_instances().await;
        for feed in ["a", "b"] {
            one.write(move |tx| tx.create_feed(feed).map(drop).map_err(Into::into)).await.unwrap();
        }
        let started = std::time::Instant::now();
        let s = one.clone();
        let holder = tokio::spawn(async move {
            s.write_to("a", "held", |tx| {
                tx.feed_for_update("a")?.expect("the feed");
                std::thread::sleep(Duration::from_millis(600));
                Ok(())
            })
            .await
            .map(|()| started.elapsed())
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let slow = hold_writer(&two).await;
        let mut queued = Vec::new();
        for feed in ["a", "b"] {
            let s = two.clone();
            queued.push(tokio::spawn(
                async move { publish_to(&s, feed, feed.into(), 5).await.map(|()| started.elapsed()) },
            ));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        slow.await.unwrap().unwrap();
        let held_until = holder.await.unwrap().unwrap();
        let [a, b] = [queued.remove(0), queued.remove(0)];
        let (a, b) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap());
        assert!(b < held_until, "b ({b:?}) waited for one's hold on a (until {held_until:?})");
        assert!(a >= held_until, "a ({a:?}) was written while one held it (until {held_until:?})");
        let items = two.read(|tx| Ok((tx.feed("a")?.unwrap().items, tx.feed("b")?.unwrap().items))).await.unwrap();
        assert_eq!(items, (1, 1));
    })
}

/// The cursors a batch's publishes make from what it keeps (the ids at the feed's newest
/// millisecond, several publishes sharing it) are the ones a read makes afterwards.
#[test]
fn cursors_made_in_a_batch_are_those_a_read_makes() {
    runtime().block_on(async {
        let store = PostgresStore::connect(&fresh().await, None).await.unwrap();
        publish(&store, "a".into(), 2).await.unwrap();
        let slow = hold_writer(&store).await;
        let mut queued = Vec::new();
        // "b" at the millisecond of "a" (committed before the batch), then three at the next.
        for (id, now) in [("b", 2), ("c", 3), ("d", 3), ("e", 3)] {
            let s = store.clone();
            queued.push(tokio::spawn(async move {
                s.write_to("f", id, move |tx| {
                    let mut f = tx.feed_for_update("f")?.expect("the feed");
                    let item = tx.publish(&mut f, id.into(), entry(id), now, Order::default())?;
                    let scope = Scope { feed: f.id, by: OrderBy::Modified, filter: &Filter::default() };
                    Ok((id, feed::paging::cursor_of(tx, scope, item.modified)?))
                })
                .await
            }));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        slow.await.unwrap().unwrap();
        let made: Vec<(&str, feed::Cursor)> =
            futures::future::join_all(queued).await.into_iter().map(|r| r.unwrap().unwrap()).collect();
        let read = store
            .read(|tx| {
                let f = tx.feed("f")?.expect("the feed");
                let scope = Scope { feed: f.id, by: OrderBy::Modified, filter: &Filter::default() };
                let mut cursors = Vec::new();
                for id in ["b", "c", "d", "e"] {
                    let item = tx.item(f.id, id)?.expect("the item");
                    cursors.push((id, feed::paging::cursor_of(tx, scope, item.modified)?));
                }
                Ok(cursors)
            })
            .await
            .unwrap();
        assert_eq!(made, read);
        assert_eq!(made[3].1.o, 2, "e is the third at its millisecond");
    })
}

/// Runs `steps` (publishes of these ids to feed "f", or "subscribe": alice to its created
/// view) as one batch: queued, in order, behind a slow closure that holds the writer.
async fn one_batch(store: &PostgresStore, steps: &[&'static str]) {
    let slow = hold_writer(store).await;
    let mut queued = Vec::new();
    for &step in steps {
        let s = store.clone();
        queued.push(tokio::spawn(async move {
            if step == "subscribe" {
                return s
                    .write(move |tx| {
                        let f = tx.feed_for_update("f")?.expect("the feed");
                        Ok(tx.put_subscription(f.id, &created_view("alice@localhost".into()))?)
                    })
                    .await;
            }
            publish_to(&s, "f", step.into(), 2).await
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    slow.await.unwrap().unwrap();
    for q in queued {
        q.await.unwrap().unwrap();
    }
}

/// Two instances on one database, each with a batch that publishes to two feeds in the
/// opposite order of the other's: each batch locks its feeds in name order before any of
/// its closures runs, so neither waits on the other in a cycle, and every publish succeeds
/// (PostgreSQL would otherwise break the deadlock by failing one of them).
#[test]
fn two_instances_batches_over_the_same_feeds_never_deadlock() {
    runtime().block_on(async {
        let url = fresh().await;
        let one = PostgresStore::connect(&url, None).await.unwrap();
        let two = PostgresStore::connect(&url, None).await.unwrap();
        for feed in ["a", "b"] {
            one.write(move |tx| tx.create_feed(feed).map(drop).map_err(Into::into)).await.unwrap();
        }
        // Each writer held by a slow closure while its next publishes queue up behind it.
        let (held_one, held_two) = (hold_writer(&one).await, hold_writer(&two).await);
        let mut queued = Vec::new();
        for (n, (store, feeds)) in [(&one, ["a", "b"]), (&two, ["b", "a"])].into_iter().enumerate() {
            for feed in feeds {
                let (s, id) = (store.clone(), format!("{n}-{feed}"));
                queued.push(tokio::spawn(async move { publish_to(&s, feed, id, 5).await }));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        held_one.await.unwrap().unwrap();
        held_two.await.unwrap().unwrap();
        for q in queued {
            q.await.unwrap().expect("no publish fails");
        }
        let items = one.read(|tx| Ok((tx.feed("a")?.unwrap().items, tx.feed("b")?.unwrap().items))).await.unwrap();
        assert_eq!(items, (2, 2));
    })
}
