//! One suite for every store. The core relies on these behaviours of whatever keeps its
//! feeds, so each is written once, as a generic `async fn` over [`Store`] that uses only what
//! the core uses (`Store::read`, `Store::write`, the write intents and the primitives), and
//! runs against every store: the SQLite store on a file and in memory, the PostgreSQL store
//! (a fresh database each, on one private server per test binary), and the in-memory
//! model. [`conformance!`] stamps out one test per store and behaviour, named
//! `store::behaviour`, so a failure names both; adding a store is one line in its call at the
//! end of this file.
//!
//! Reads and writes go through the store one at a time, as the service's do, and the checks
//! are made on what comes back, outside the closures.

use feed::outbox::{HubSubscription, OutboxStats};
use feed::ports::{ChangeSink, FeedRow, Range, ReadTx, Scope, SourceState, Subscription, WriteTx};
use feed::{Change, Entry, FeedError, Filter, Item, Key, NodeName, Order, OrderBy, Payload, Store};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use std::ops::Deref;
use std::sync::{Arc, Mutex};
use store_postgres::PostgresStore;
use store_sqlite::SqliteStore;
use testkit::memory_store::MemoryStore;
use testkit::postgres_server::TempServer;

// ----- the stores -----

/// A store under test, with what must outlive it (the directory of a database file).
struct Subject<S> {
    store: S,
    _dir: Option<tempfile::TempDir>,
}

/// Opens a new, empty store that hands its committed changes to the sink.
type Open<S> = fn(Option<ChangeSink>) -> Subject<S>;

fn open_sqlite_file(sink: Option<ChangeSink>) -> Subject<SqliteStore> {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("feeds.db"), sink).unwrap();
    Subject { store, _dir: Some(dir) }
}

fn open_sqlite_in_memory(sink: Option<ChangeSink>) -> Subject<SqliteStore> {
    Subject { store: SqliteStore::open_in_memory(sink).unwrap(), _dir: None }
}

/// A fresh database on this test binary's private PostgreSQL server, started on first use
/// and stopped when the binary exits.
fn open_postgres(sink: Option<ChangeSink>) -> Subject<PostgresStore> {
    let store = tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(async {
            let url = TempServer::shared().create_database().await.unwrap();
            PostgresStore::connect(&url, sink).await.unwrap()
        })
    });
    Subject { store, _dir: None }
}

fn open_memory(sink: Option<ChangeSink>) -> Subject<MemoryStore> {
    Subject { store: MemoryStore::new(sink), _dir: None }
}

impl<S> Deref for Subject<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.store
    }
}

/// A scope that owns its filter, so it can move into a read.
#[derive(Clone, Debug)]
struct Owned {
    feed: i64,
    by: OrderBy,
    filter: Filter,
}

impl Owned {
    fn new(feed: &FeedRow, by: OrderBy, filter: &Filter) -> Owned {
        Owned { feed: feed.id, by, filter: filter.clone() }
    }

    fn scope(&self) -> Scope<'_> {
        Scope { feed: self.feed, by: self.by, filter: &self.filter }
    }
}

/// Each read and write as a caller makes it: one transaction, its result awaited.
impl<S: Store> Subject<S> {
    async fn read_ok<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn ReadTx) -> Result<T, FeedError> + Send + 'static,
    ) -> T {
        self.store.read(f).await.expect("the read succeeds")
    }

    async fn write_ok<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn WriteTx) -> Result<T, FeedError> + Send + 'static,
    ) -> T {
        self.store.write(f).await.expect("the write succeeds")
    }

    async fn feed(&self, name: &str) -> Option<FeedRow> {
        let name = name.to_string();
        self.read_ok(move |tx| Ok(tx.feed(&name)?)).await
    }

    async fn feed_names(&self, after: Option<&str>, limit: usize) -> Vec<String> {
        let after = after.map(String::from);
        let feeds = self.read_ok(move |tx| Ok(tx.feeds(after.as_deref(), limit)?)).await;
        feeds.into_iter().map(|f| f.name).collect()
    }

    async fn item(&self, feed: &FeedRow, id: &str) -> Option<Item> {
        let (feed, id) = (feed.id, id.to_string());
        self.read_ok(move |tx| Ok(tx.item(feed, &id)?)).await
    }

    /// The ids of a scan, concatenated (the suite's ids are one letter each).
    async fn scan(&self, at: &Owned, after: Option<Key>, before: Option<Key>, desc: bool, limit: usize) -> String {
        let at = at.clone();
        let items =
            self.read_ok(move |tx| Ok(tx.scan(at.scope(), Range { after, before, descending: desc, limit })?)).await;
        items.iter().map(|i| i.id.as_str()).collect()
    }

    async fn count(&self, at: &Owned) -> u64 {
        let at = at.clone();
        self.read_ok(move |tx| Ok(tx.count(at.scope())?)).await
    }

    async fn rank(&self, at: &Owned, key: Key) -> u64 {
        let at = at.clone();
        self.read_ok(move |tx| Ok(tx.rank(at.scope(), key)?)).await
    }

    async fn nth(&self, at: &Owned, index: u64) -> Option<Key> {
        let at = at.clone();
        self.read_ok(move |tx| Ok(tx.nth(at.scope(), index)?)).await
    }

    async fn ties(&self, at: &Owned, t: i64, upto_seq: i64, limit: usize) -> Vec<String> {
        let at = at.clone();
        self.read_ok(move |tx| Ok(tx.ties(at.scope(), t, upto_seq, limit)?)).await
    }

    /// Stores a subscription to the feed named `feed`.
    async fn subscribe(&self, feed: &str, sub: Subscription) {
        let feed = feed.to_string();
        self.write_ok(move |tx| {
            let row = tx.feed(&feed)?.expect("the feed exists");
            Ok(tx.put_subscription(row.id, &sub)?)
        })
        .await
    }

    /// Everything a caller can see of a feed: every feed row, its items, its subscriptions.
    async fn everything(&self, feed: &str) -> (Vec<FeedRow>, Vec<Item>, Vec<Subscription>) {
        let feed = feed.to_string();
        self.read_ok(move |tx| {
            let row = tx.feed(&feed)?.expect("the feed exists");
            let all = Filter::default();
            let items = tx.scan(
                Scope { feed: row.id, by: OrderBy::Modified, filter: &all },
                Range { limit: 1000, ..Range::default() },
            )?;
            let mut subs = Vec::new();
            for view in tx.subscribed_views(row.id)? {
                subs.extend(tx.subscribers(row.id, &view)?);
            }
            Ok((tx.feeds(None, 1000)?, items, subs))
        })
        .await
    }
}

/// An Atom entry with these fields, as a face hands it to the core.
fn entry(id: &str, author: Option<&str>, cats: &[&str]) -> Entry {
    Entry {
        xml: format!("<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:{id}</id></entry>"),
        atom_id: Some(format!("urn:{id}")),
        author: author.map(Into::into),
        categories: cats.iter().map(|c| c.to_string()).collect(),
    }
}

/// Feed "f", published the core's way at times 10, 10, 10, 20 and 30: a by ann [x],
/// b by bob [x, y], c [y], d by ann, e by ann [x, x]. Created and modified keys are both
/// (10,1), (10,2), (10,3), (20,4), (30,5).
async fn sample<S: Store>(s: &Subject<S>) -> FeedRow {
    s.write_ok(|tx| {
        let mut f = tx.create_feed("f")?;
        let items: [(&str, i64, Option<&str>, &[&str]); 5] = [
            ("a", 10, Some("ann"), &["x"]),
            ("b", 10, Some("bob"), &["x", "y"]),
            ("c", 10, None, &["y"]),
            ("d", 20, Some("ann"), &[]),
            ("e", 30, Some("ann"), &["x", "x"]),
        ];
        for (id, now, author, cats) in items {
            tx.publish(&mut f, id.into(), entry(id, author, cats), now, Order::default())?;
        }
        Ok(f)
    })
    .await
}

fn filter(author: Option<&str>, category: Option<&str>) -> Filter {
    Filter { author: author.map(Into::into), category: category.map(Into::into) }
}

fn sub(node: &str, view: &str, jid: &str, subid: &str) -> Subscription {
    Subscription { node: node.into(), view: view.into(), jid: jid.into(), subid: subid.into() }
}

// ----- feeds, items, orders -----

async fn feeds_are_created_listed_by_name_and_saved<S: Store>(open: Open<S>) {
    let s = open(None);
    let created = s
        .write_ok(|tx| {
            let mut rows = Vec::new();
            for name in ["m", "a", "z", "b"] {
                rows.push(tx.create_feed(name)?);
            }
            Ok(rows)
        })
        .await;
    let mut ids: Vec<i64> = created.iter().map(|f| f.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "each feed has its own id: {created:?}");
    assert!(s.write(|tx| Ok(tx.create_feed("a")?)).await.is_err(), "names are unique");
    assert_eq!(s.feed_names(None, 10).await, ["a", "b", "m", "z"]);
    assert_eq!(s.feed_names(Some("b"), 2).await, ["m", "z"]);
    assert_eq!(s.feed_names(Some("c"), 10).await, ["m", "z"], "after need not name a feed");
    assert_eq!(s.feed_names(Some("z"), 2).await, Vec::<String>::new());
    assert_eq!(s.feed_names(None, 0).await, Vec::<String>::new());
    let mut m = s.feed("m").await.unwrap();
    assert_eq!(m, created[0]);
    assert_eq!((m.items, m.last_t, m.last_mseq), (0, 0, 0));
    m.items = 7;
    m.last_t = 1_700_000_000_000;
    m.last_mseq = 9;
    let saved = m.clone();
    s.write_ok(move |tx| Ok(tx.save_feed(&saved)?)).await;
    assert_eq!(s.feed("m").await, Some(m.clone()));
    assert_eq!(s.feed("nope").await, None);
    let unknown = FeedRow { id: 999, ..m.clone() };
    assert!(s.write(move |tx| Ok(tx.save_feed(&unknown)?)).await.is_err(), "saving an unknown feed is an error");
    assert_eq!(s.feed("m").await, Some(m));
}

async fn items_round_trip_including_tombstones<S: Store>(open: Open<S>) {
    let s = open(None);
    let (mut f, g) = s.write_ok(|tx| Ok((tx.create_feed("f")?, tx.create_feed("g")?))).await;
    let mut e = entry("a", Some("ann"), &["x", "a:b", "x"]);
    e.atom_id = None;
    let mut row = f.clone();
    let a = s.write_ok(move |tx| tx.publish(&mut row, "a".into(), e, 5, Order::default())).await;
    assert_eq!(s.item(&f, "a").await, Some(a.clone()));
    assert_eq!(s.item(&g, "a").await, None, "items belong to one feed");
    assert_eq!(s.item(&f, "b").await, None);
    f = s.feed("f").await.unwrap();
    assert_eq!((f.items, f.last_t, f.last_mseq), (1, 5, 1), "publish saved the feed's counters");
    let mut row = f.clone();
    s.write_ok(move |tx| tx.retract(&mut row, "a", 6, Order::default())).await;
    let tomb = s.item(&f, "a").await.unwrap();
    assert!(tomb.is_deleted());
    let want = Item {
        modified: Key { t: 6, seq: 2 },
        payload: Payload::Tombstone { atom_ref: "a".into(), when: 6 },
        ..a.clone()
    };
    assert_eq!(tomb, want, "a tombstone keeps the id, created key, author and categories");
    // The same id in another feed is another item, stored as given, and visible to reads
    // in the transaction that wrote it.
    let exact = Item {
        id: "a".into(),
        created: Key { t: -3, seq: 1 },
        modified: Key { t: i64::MAX, seq: i64::MAX },
        author: Some("Zoë «ö» \u{1F600}".into()),
        categories: vec!["".into(), "a b".into(), "a b".into()],
        atom_id: Some("tag:x,2024:'\"<&>".into()),
        payload: Payload::Entry("<entry xmlns='http://www.w3.org/2005/Atom'>\u{0}?\u{7f}</entry>".into()),
    };
    let stored = exact.clone();
    let seen = s
        .write_ok(move |tx| {
            tx.insert_item(g.id, &stored)?;
            Ok(tx.item(g.id, "a")?)
        })
        .await;
    assert_eq!(seen, Some(exact.clone()));
    assert_eq!(s.item(&g, "a").await, Some(exact));
    assert_eq!(s.item(&f, "a").await, Some(want));
}

async fn scan_bounds_are_exclusive_also_at_time_boundaries<S: Store>(open: Open<S>) {
    let s = open(None);
    let f = sample(&s).await;
    let all = Owned::new(&f, OrderBy::Created, &Filter::default());
    let k = |t, seq| Some(Key { t, seq });
    let (start, end) = (|t| Some(Key::start_of(t)), |t| Some(Key::end_of(t)));
    #[rustfmt::skip]
    let cases = [
        (None, None, false, 100, "abcde"),
        (None, None, true, 100, "edcba"),
        (None, None, false, 2, "ab"),
        (None, None, true, 2, "ed"),
        (None, None, false, 0, ""),
        // Item keys are exclusive.
        (k(10, 2), None, false, 100, "cde"),
        (None, k(10, 2), true, 100, "a"),
        (k(10, 1), k(20, 4), false, 100, "bc"),
        (k(10, 1), k(20, 4), true, 1, "c"),
        // Start and end of a time: everything at that time is after / before it.
        (start(10), None, false, 100, "abcde"),
        (end(10), None, false, 100, "de"),
        (None, start(10), true, 100, ""),
        (None, end(10), true, 100, "cba"),
        (start(10), end(10), false, 100, "abc"),
        (end(10), start(30), false, 100, "d"),
        (start(i64::MIN), end(i64::MAX), false, usize::MAX, "abcde"),
        (start(15), end(25), true, 100, "d"),
        (end(30), None, false, 100, ""),
        // Empty or inverted ranges are empty, not errors.
        (end(20), start(20), false, 100, ""),
        (k(20, 4), k(20, 4), true, 100, ""),
    ];
    for (after, before, desc, limit, want) in cases {
        assert_eq!(
            s.scan(&all, after, before, desc, limit).await,
            want,
            "{after:?}..{before:?} desc={desc} limit={limit}"
        );
    }
}

async fn filters_restrict_scans_counts_ranks_positions_and_ties<S: Store>(open: Open<S>) {
    let s = open(None);
    let f = sample(&s).await;
    let cases = [
        (Filter::default(), "abcde"),
        (filter(Some("ann"), None), "ade"),
        (filter(None, Some("x")), "abe"),
        (filter(Some("ann"), Some("x")), "ae"),
        (filter(Some("nobody"), None), ""),
        // Terms and names match exactly, case included.
        (filter(Some("Ann"), None), ""),
        (filter(None, Some("X")), ""),
    ];
    for by in [OrderBy::Created, OrderBy::Modified] {
        for (filter, want) in &cases {
            let at = Owned::new(&f, by, filter);
            assert_eq!(s.scan(&at, None, None, false, 100).await, *want, "{at:?}");
            assert_eq!(s.scan(&at, None, None, true, 100).await, want.chars().rev().collect::<String>(), "{at:?}");
            assert_eq!(s.count(&at).await, want.len() as u64, "{at:?}");
            for (i, id) in want.chars().enumerate() {
                let key = s.item(&f, &id.to_string()).await.unwrap().key(by);
                assert_eq!(s.rank(&at, key).await, i as u64, "{at:?} rank of {id}");
                assert_eq!(s.nth(&at, i as u64).await, Some(key), "{at:?} position {i}");
            }
            assert_eq!(s.nth(&at, want.len() as u64).await, None);
            assert_eq!(s.nth(&at, u64::MAX).await, None);
            assert_eq!(s.rank(&at, Key::end_of(i64::MAX)).await, want.len() as u64);
            assert_eq!(s.rank(&at, Key::start_of(i64::MIN)).await, 0);
            // a, b and c are at time 10, with seqs 1, 2 and 3 in both orders.
            let at10: Vec<String> = want.chars().filter(|c| "abc".contains(*c)).map(String::from).collect();
            assert_eq!(s.ties(&at, 10, i64::MAX, 100).await, at10, "{at:?}");
            assert_eq!(s.ties(&at, 10, i64::MAX, 1).await, at10[..at10.len().min(1)], "{at:?}");
            let upto2: Vec<String> = at10.iter().filter(|i| *i != "c").cloned().collect();
            assert_eq!(s.ties(&at, 10, 2, 100).await, upto2, "{at:?}");
            assert_eq!(s.ties(&at, 10, 0, 100).await, Vec::<String>::new());
            assert_eq!(s.ties(&at, 10, i64::MAX, 0).await, Vec::<String>::new());
            assert_eq!(s.ties(&at, 11, i64::MAX, 100).await, Vec::<String>::new());
        }
    }
    // Ranks of keys that are not items' keys: time bounds.
    let all = Owned::new(&f, OrderBy::Created, &Filter::default());
    for (key, want) in [
        (Key::start_of(10), 0),
        (Key::end_of(10), 3),
        (Key::start_of(20), 3),
        (Key::start_of(25), 4),
        (Key::end_of(30), 5),
    ] {
        assert_eq!(s.rank(&all, key).await, want, "rank of {key:?}");
    }
}

async fn updates_move_items_in_modified_order_and_replace_categories<S: Store>(open: Open<S>) {
    let s = open(None);
    let mut f = sample(&s).await;
    let mut row = f.clone();
    let new =
        s.write_ok(move |tx| tx.publish(&mut row, "a".into(), entry("a", None, &["z"]), 40, Order::default())).await;
    assert_eq!((new.created, new.modified), (Key { t: 10, seq: 1 }, Key { t: 40, seq: 6 }));
    f = s.feed("f").await.unwrap();
    assert_eq!((f.items, f.last_t, f.last_mseq), (5, 40, 6), "an update adds no item");
    let none = Filter::default();
    let by_mod = Owned::new(&f, OrderBy::Modified, &none);
    assert_eq!(s.scan(&by_mod, None, None, false, 10).await, "bcdea");
    assert_eq!(s.scan(&Owned::new(&f, OrderBy::Created, &none), None, None, false, 10).await, "abcde");
    assert_eq!(s.count(&by_mod).await, 5, "an update adds no item");
    assert_eq!(s.rank(&by_mod, new.modified).await, 4);
    assert_eq!(s.nth(&by_mod, 4).await, Some(new.modified));
    assert_eq!(s.nth(&by_mod, 0).await, Some(Key { t: 10, seq: 2 }));
    assert_eq!(s.ties(&by_mod, 10, i64::MAX, 10).await, ["b", "c"], "a left time 10 in modified order");
    assert_eq!(s.ties(&by_mod, 40, i64::MAX, 10).await, ["a"]);
    let x = filter(None, Some("x"));
    let z = filter(None, Some("z"));
    let ann = filter(Some("ann"), None);
    assert_eq!(s.scan(&Owned::new(&f, OrderBy::Created, &x), None, None, false, 10).await, "be");
    assert_eq!(s.scan(&Owned::new(&f, OrderBy::Modified, &z), None, None, false, 10).await, "a");
    assert_eq!(s.scan(&Owned::new(&f, OrderBy::Created, &z), None, None, false, 10).await, "a");
    assert_eq!(s.scan(&Owned::new(&f, OrderBy::Modified, &ann), None, None, false, 10).await, "de");
    assert_eq!(s.count(&Owned::new(&f, OrderBy::Modified, &x)).await, 2);
    // Guards: the id and created key stay, and the item must exist; a refused update
    // changes nothing.
    let moved = Item { created: Key { t: 1, seq: 9 }, ..new.clone() };
    let (id, old) = (f.id, new.clone());
    assert!(s.write(move |tx| Ok(tx.update_item(id, &old, &moved)?)).await.is_err());
    let ghost = Item { id: "ghost".into(), ..new.clone() };
    assert!(s.write(move |tx| Ok(tx.update_item(id, &ghost, &ghost)?)).await.is_err());
    assert_eq!(s.item(&f, "a").await, Some(new));
    assert_eq!(s.item(&f, "ghost").await, None);
    assert_eq!(s.scan(&by_mod, None, None, false, 10).await, "bcdea");
}

// ----- subscriptions -----

async fn subscriptions_upsert_list_and_delete<S: Store>(open: Open<S>) {
    let s = open(None);
    let (f, g) = s.write_ok(|tx| Ok((tx.create_feed("f")?, tx.create_feed("g")?))).await;
    let s1 = sub("f", "f?order=-created", "alice@x/phone", "1");
    let s2 = sub("f?order=modified", "f?order=modified", "alice@x", "2");
    let s3 = sub("f", "f?order=-created", "bob@y", "3");
    let s4 = sub("g", "g?order=-created", "alice@x/laptop", "4");
    let subs = [(f.id, s1.clone()), (f.id, s2.clone()), (f.id, s3.clone()), (g.id, s4.clone())];
    s.write_ok(move |tx| Ok(subs.iter().try_for_each(|(feed, sub)| tx.put_subscription(*feed, sub))?)).await;
    let (fid, gid) = (f.id, g.id);
    let views = move |feed: i64| move |tx: &dyn ReadTx| Ok(tx.subscribed_views(feed)?);
    let subscribers = move |view: &str| {
        let view = view.to_string();
        move |tx: &dyn ReadTx| Ok(tx.subscribers(fid, &view)?)
    };
    let of = |bare: &str| {
        let bare = bare.to_string();
        move |tx: &dyn ReadTx| Ok(tx.subscriptions_of(&bare)?)
    };
    let count = move |tx: &dyn ReadTx| Ok(tx.subscription_count(fid)?);
    assert_eq!(s.read_ok(views(fid)).await, ["f?order=-created", "f?order=modified"]);
    assert_eq!(s.read_ok(subscribers("f?order=-created")).await, [s1.clone(), s3.clone()]);
    assert_eq!(s.read_ok(count).await, 3);
    assert_eq!(s.read_ok(of("alice@x")).await, [s1.clone(), s2.clone(), s4.clone()]);
    assert_eq!(s.read_ok(of("alice@x/phone")).await, Vec::<Subscription>::new(), "subscriptions_of takes a bare JID");
    // Same view and JID: replaced, not added.
    let s1b = sub("f?order=-created", "f?order=-created", "alice@x/phone", "9");
    s.subscribe("f", s1b.clone()).await;
    assert_eq!(s.read_ok(count).await, 3);
    assert_eq!(s.read_ok(subscribers("f?order=-created")).await, [s1b, s3]);
    let delete = move |tx: &mut dyn WriteTx| Ok(tx.delete_subscription(fid, "f?order=modified", "alice@x")?);
    assert!(s.write_ok(delete).await);
    assert!(!s.write_ok(delete).await, "deleting twice finds nothing the second time");
    assert_eq!(s.read_ok(views(fid)).await, ["f?order=-created"]);
    assert_eq!(s.read_ok(views(gid)).await, ["g?order=-created"]);
    // All of one full JID's subscriptions, across feeds; other resources keep theirs.
    s.subscribe("g", sub("g", "g?order=-created", "alice@x/phone", "5")).await;
    let delete_all = |tx: &mut dyn WriteTx| Ok(tx.delete_subscriptions_of("alice@x/phone")?);
    assert_eq!(s.write_ok(delete_all).await, 2);
    assert_eq!(s.write_ok(delete_all).await, 0);
    let bare = |tx: &mut dyn WriteTx| Ok(tx.delete_subscriptions_of("alice@x")?);
    assert_eq!(s.write_ok(bare).await, 0, "only subscriptions of exactly that JID go");
    assert_eq!(s.read_ok(of("alice@x")).await, [s4]);
    assert_eq!(s.read_ok(count).await, 1);
}

// ----- WebSub subscriptions and the outbox -----

fn hub_sub(feed: i64, view: &str, callback: &str, expires: i64) -> HubSubscription {
    HubSubscription {
        id: 0,
        feed,
        view: view.into(),
        topic: format!("http://h/feeds/{view}"),
        callback: callback.into(),
        secret: Some("s3cret".into()),
        expires,
        delivered: 0,
    }
}

async fn hub_subscriptions_renew_expire_and_delete<S: Store>(open: Open<S>) {
    let s = open(None);
    let (f, g) = s.write_ok(|tx| Ok((tx.create_feed("f")?, tx.create_feed("g")?))).await;
    let (fid, gid) = (f.id, g.id);
    let put = |sub: HubSubscription| move |tx: &mut dyn WriteTx| Ok(tx.put_hub_subscription(&sub)?);
    let a = s.write_ok(put(hub_sub(fid, "f?order=modified", "http://a/cb", 100))).await;
    let b = s.write_ok(put(hub_sub(fid, "f?order=-created", "http://b/cb", 200))).await;
    let c = s.write_ok(put(hub_sub(gid, "g?order=-created", "http://a/cb", 300))).await;
    assert!(a.id < b.id && b.id < c.id, "ids ascend: {a:?} {b:?} {c:?}");
    assert_eq!((a.callback.as_str(), a.expires, a.secret.as_deref()), ("http://a/cb", 100, Some("s3cret")));
    // Subscribing again renews: same id and progress, new lease, secret and topic spelling.
    let renewed = HubSubscription { secret: None, expires: 500, topic: "t2".into(), ..a.clone() };
    let again = s.write_ok(put(HubSubscription { id: 0, delivered: 99, ..renewed.clone() })).await;
    assert_eq!(again, renewed, "renewal keeps the id and delivered mark");
    let views = move |tx: &dyn ReadTx| Ok(tx.hub_views(fid)?);
    assert_eq!(s.read_ok(views).await, ["f?order=-created", "f?order=modified"]);
    let of_f = move |tx: &dyn ReadTx| Ok(tx.hub_subscribers(fid)?);
    assert_eq!(s.read_ok(of_f).await, [b.clone(), renewed.clone()], "by view, then callback");
    let all = |after: i64, limit: usize| move |tx: &dyn ReadTx| Ok(tx.hub_subscriptions(after, limit)?);
    assert_eq!(s.read_ok(all(0, 10)).await, [renewed.clone(), b.clone(), c.clone()]);
    assert_eq!(s.read_ok(all(renewed.id, 1)).await, std::slice::from_ref(&b), "paged by id");
    // Leases: those ended at `now` go, with their ids reported.
    let expire = |now: i64| move |tx: &mut dyn WriteTx| Ok(tx.expire_hub_subscriptions(now)?);
    assert_eq!(s.write_ok(expire(200)).await, [b.id]);
    assert_eq!(s.write_ok(expire(200)).await, Vec::<i64>::new());
    let (cid, aid) = (c.id, a.id);
    let delete = move |tx: &mut dyn WriteTx| Ok(tx.delete_hub_subscription(gid, "g?order=-created", "http://a/cb")?);
    assert!(s.write_ok(delete).await);
    assert!(!s.write_ok(delete).await, "deleting twice finds nothing the second time");
    let delivered = |id: i64| move |tx: &mut dyn WriteTx| Ok(tx.hub_delivered(id, 7)?);
    assert!(!s.write_ok(delivered(cid)).await, "a deleted subscription is not advanced");
    assert!(s.write_ok(delivered(aid)).await);
    assert_eq!(s.read_ok(all(0, 10)).await, [HubSubscription { delivered: 7, ..renewed }]);
}

async fn source_states_are_saved_per_feed_and_replaced<S: Store>(open: Open<S>) {
    let s = open(None);
    let (f, g) = s.write_ok(|tx| Ok((tx.create_feed("f")?, tx.create_feed("g")?))).await;
    let (fid, gid) = (f.id, g.id);
    let get = |feed: i64| move |tx: &dyn ReadTx| Ok(tx.source_state(feed)?);
    assert_eq!(s.read_ok(get(fid)).await, None, "nothing saved yet");
    let first = SourceState {
        configured: "https://a.example/feed".into(),
        location: "https://a.example/feed".into(),
        etag: Some("\"v1\"".into()),
        last_modified: Some("Mon, 01 Jan 2024 00:00:00 GMT".into()),
    };
    let put = |feed: i64, st: SourceState| move |tx: &mut dyn WriteTx| Ok(tx.put_source_state(feed, &st)?);
    s.write_ok(put(fid, first.clone())).await;
    assert_eq!(s.read_ok(get(fid)).await, Some(first.clone()));
    assert_eq!(s.read_ok(get(gid)).await, None, "per feed");
    // Moved, and validators gone: replaced whole, NULLs included.
    let moved = SourceState { location: "https://b.example/feed".into(), etag: None, last_modified: None, ..first };
    s.write_ok(put(fid, moved.clone())).await;
    assert_eq!(s.read_ok(get(fid)).await, Some(moved));
}

async fn outbox_rows_follow_commits_in_order_and_are_pruned<S: Store>(open: Open<S>) {
    let (seen, sink) = recording();
    let s = open(Some(sink));
    s.write_ok(publishing("a", 10)).await;
    let f = s.feed("f").await.unwrap();
    let fid = f.id;
    let view = NodeName::parse("f?order=modified").unwrap().resolve(Order::default()).canonical();
    let stats = |tx: &dyn ReadTx| Ok(tx.outbox_stats()?);
    assert_eq!(s.read_ok(stats).await.rows, 0, "no WebSub subscription, no outbox row");
    let put = |sub: HubSubscription| move |tx: &mut dyn WriteTx| Ok(tx.put_hub_subscription(&sub)?);
    let a = s.write_ok(put(hub_sub(fid, &view, "http://a/cb", i64::MAX))).await;
    let (v, first_seen) = (view.clone(), seen.lock().unwrap().len());
    let outbox = move |after: i64| {
        let v = v.clone();
        move |tx: &dyn ReadTx| Ok(tx.outbox(fid, &v, after, 100)?)
    };
    // A new item, an update and a retraction: three rows, chained, in commit order.
    s.write_ok(publishing("b", 20)).await;
    s.write_ok(publishing("b", 30)).await;
    s.write_ok(|tx| {
        let mut f = tx.feed("f")?.unwrap();
        tx.retract(&mut f, "b", 40, Order::default())
    })
    .await;
    let rows = s.read_ok(outbox(a.delivered)).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.windows(2).all(|w| w[0].seq < w[1].seq && w[1].previous == Some(w[0].last)), "{rows:?}");
    assert!(rows.iter().all(|r| r.item_id == "b" && r.count == 2 && r.view == view && r.feed == fid));
    assert!(rows[0].previous.is_some(), "the view held `a` before");
    assert!(matches!(rows[2].payload, Payload::Tombstone { .. }));
    assert_eq!(rows.iter().map(|r| r.at).collect::<Vec<_>>(), [20, 30, 40]);
    let changes: Vec<Change> = seen.lock().unwrap()[first_seen..].iter().flatten().cloned().collect();
    assert!(changes.iter().all(|c| c.views.iter().any(|cv| cv.view == view)), "a WebSub view is a subscribed view");
    assert_eq!(s.read_ok(stats).await, OutboxStats { rows: 3, oldest: Some(20) });
    // A new subscription starts after the newest row; progress never moves back.
    let b = s.write_ok(put(hub_sub(fid, &view, "http://b/cb", i64::MAX))).await;
    assert_eq!(b.delivered, rows[2].seq);
    assert!(s.read_ok(outbox(b.delivered)).await.is_empty());
    let (aid, s1, s0) = (a.id, rows[1].seq, rows[0].seq);
    s.write_ok(move |tx| Ok((tx.hub_delivered(aid, s1)?, tx.hub_delivered(aid, s0)?))).await;
    // Pruning drops what every subscription of the view has passed...
    let prune = |keep: u64| move |tx: &mut dyn WriteTx| Ok(tx.prune_outbox(keep)?);
    assert_eq!(s.write_ok(prune(100)).await, 2);
    assert_eq!(s.read_ok(outbox(0)).await, rows[2..].to_vec());
    // ...and the oldest rows of a view holding more than `keep`.
    for (i, id) in ["c", "d", "e"].iter().enumerate() {
        s.write_ok(publishing(id, 50 + i as i64)).await;
    }
    assert_eq!(s.write_ok(prune(2)).await, 2);
    let kept = s.read_ok(outbox(0)).await;
    assert_eq!(kept.iter().map(|r| r.item_id.as_str()).collect::<Vec<_>>(), ["d", "e"]);
    // Without subscriptions nothing is owed: rows go, and new changes add none; sequence
    // numbers are never handed out twice.
    let v = view.clone();
    s.write_ok(move |tx| {
        tx.delete_hub_subscription(fid, &v, "http://a/cb")?;
        Ok(tx.delete_hub_subscription(fid, &v, "http://b/cb")?)
    })
    .await;
    assert_eq!(s.write_ok(prune(100)).await, 2);
    s.write_ok(publishing("f", 60)).await;
    assert_eq!(s.read_ok(stats).await, OutboxStats { rows: 0, oldest: None });
    let c = s.write_ok(put(hub_sub(fid, &view, "http://c/cb", i64::MAX))).await;
    s.write_ok(publishing("g", 70)).await;
    let last = s.read_ok(outbox(c.delivered)).await;
    assert_eq!(last.len(), 1);
    assert!(last[0].seq > kept[1].seq, "{} after {}", last[0].seq, kept[1].seq);
}

// ----- the model -----

#[derive(Clone, Debug)]
enum Op {
    /// Publish into feed `feed % 2` with this author and categories, after `dt` ms and
    /// skipping `gap` modified seqs.
    Insert { feed: u8, author: u8, cats: u8, dt: i64, gap: i64 },
    /// Update (or retract) the `which`-th item of the feed.
    Update { feed: u8, which: usize, author: u8, cats: u8, tomb: bool, dt: i64, gap: i64 },
}

fn op() -> impl Strategy<Value = Op> {
    // Gaps up to 3000 cross a store's level-1 buckets often; a rare huge gap crosses level 2.
    let gap = prop_oneof![8 => 1i64..3, 3 => 1i64..3000, 1 => Just(1i64 << 20)];
    prop_oneof![
        3 => (0u8..2, 0u8..3, 0u8..4, 0i64..3, gap.clone())
            .prop_map(|(feed, author, cats, dt, gap)| Op::Insert { feed, author, cats, dt, gap }),
        2 => (0u8..2, any::<usize>(), 0u8..3, 0u8..4, any::<bool>(), 0i64..3, gap)
            .prop_map(|(feed, which, author, cats, tomb, dt, gap)| Op::Update { feed, which, author, cats, tomb, dt, gap }),
    ]
}

fn author_of(n: u8) -> Option<String> {
    (n > 0).then(|| format!("a{n}"))
}

fn cats_of(bits: u8) -> Vec<String> {
    ["x", "y"].iter().enumerate().filter(|(i, _)| bits & (1 << i) != 0).map(|(_, c)| c.to_string()).collect()
}

/// Applies the ops to the store, one write each, and to a plain list per feed, with exact
/// keys: created seqs dense, times never going back, modified seqs growing with gaps.
async fn run_model<S: Store>(s: &Subject<S>, ops: &[Op]) -> Vec<(FeedRow, Vec<Item>)> {
    let rows = s.write_ok(|tx| Ok([tx.create_feed("f0")?, tx.create_feed("f1")?])).await;
    let mut feeds: Vec<(FeedRow, Vec<Item>)> = rows.into_iter().map(|r| (r, Vec::new())).collect();
    let mut now = 1_700_000_000_000i64;
    for op in ops {
        let (feed, dt, gap) = match *op {
            Op::Insert { feed, dt, gap, .. } | Op::Update { feed, dt, gap, .. } => (feed, dt, gap),
        };
        now += dt;
        let (row, model) = &mut feeds[feed as usize % 2];
        let (old, new) = match *op {
            Op::Insert { author, cats, .. } => {
                row.last_t = row.last_t.max(now);
                row.last_mseq += gap;
                row.items += 1;
                let new = Item {
                    id: format!("i{}", row.items),
                    created: Key { t: row.last_t, seq: row.items as i64 },
                    modified: Key { t: row.last_t, seq: row.last_mseq },
                    author: author_of(author),
                    categories: cats_of(cats),
                    atom_id: None,
                    payload: Payload::Entry("<entry/>".into()),
                };
                model.push(new.clone());
                (None, new)
            }
            Op::Update { which, author, cats, tomb, .. } => {
                if model.is_empty() {
                    continue;
                }
                let at = which % model.len();
                row.last_t = row.last_t.max(now);
                row.last_mseq += gap;
                let old = model[at].clone();
                let payload = if tomb {
                    Payload::Tombstone { atom_ref: old.id.clone(), when: row.last_t }
                } else {
                    Payload::Entry(format!("<entry>{}</entry>", row.last_mseq))
                };
                let new = Item {
                    modified: Key { t: row.last_t, seq: row.last_mseq },
                    author: author_of(author),
                    categories: cats_of(cats),
                    payload,
                    ..old.clone()
                };
                model[at] = new.clone();
                (Some(old), new)
            }
        };
        let row = row.clone();
        s.write_ok(move |tx| {
            match &old {
                None => tx.insert_item(row.id, &new)?,
                Some(old) => tx.update_item(row.id, old, &new)?,
            }
            Ok(tx.save_feed(&row)?)
        })
        .await;
    }
    feeds
}

/// Checks every read of every scope of `feed` against the model's list, in one snapshot.
fn check_feed(tx: &dyn ReadTx, row: &FeedRow, model: &[Item]) -> Result<(), TestCaseError> {
    prop_assert_eq!(tx.feed(&row.name)?, Some(row.clone()));
    let filters = [Filter::default(), filter(Some("a1"), None), filter(None, Some("x")), filter(Some("a2"), Some("y"))];
    for by in [OrderBy::Created, OrderBy::Modified] {
        for filter in &filters {
            let s = Scope { feed: row.id, by, filter };
            let mut want: Vec<&Item> =
                model.iter().filter(|i| filter.matches(i.author.as_deref(), &i.categories)).collect();
            want.sort_by_key(|i| i.key(by));
            let keys: Vec<Key> = want.iter().map(|i| i.key(by)).collect();
            let ctx = format!("{by:?} {filter:?}");
            prop_assert_eq!(tx.count(s)?, want.len() as u64, "count {}", ctx);
            for (i, k) in keys.iter().enumerate() {
                prop_assert_eq!(tx.nth(s, i as u64)?, Some(*k), "nth {} {}", i, ctx);
                prop_assert_eq!(tx.rank(s, *k)?, i as u64, "rank {:?} {}", k, ctx);
            }
            prop_assert_eq!(tx.nth(s, keys.len() as u64)?, None);
            // Bounds: none, every item key, and both ends of a sample of the times present.
            let mut bounds: Vec<Option<Key>> = vec![None];
            for (i, k) in keys.iter().enumerate() {
                bounds.push(Some(*k));
                if i % 3 == 0 {
                    bounds.extend([Some(Key::start_of(k.t)), Some(Key::end_of(k.t))]);
                }
            }
            for (j, b) in bounds.iter().enumerate() {
                if let Some(b) = b {
                    let below = keys.iter().filter(|k| *k < b).count() as u64;
                    prop_assert_eq!(tx.rank(s, *b)?, below, "rank of bound {:?} {}", b, ctx);
                }
                let other = bounds[(j * 7 + 3) % bounds.len()];
                for (after, before) in [(*b, None), (None, *b), (*b, other)] {
                    let inside =
                        |i: &&&Item| after.is_none_or(|a| i.key(by) > a) && before.is_none_or(|z| i.key(by) < z);
                    for (desc, limit) in [(false, 3), (true, 3), (j % 2 == 0, usize::MAX)] {
                        let mut exp: Vec<Item> = want.iter().filter(inside).map(|i| (*i).clone()).collect();
                        if desc {
                            exp.reverse();
                        }
                        exp.truncate(limit);
                        let got = tx.scan(s, Range { after, before, descending: desc, limit })?;
                        prop_assert_eq!(got, exp, "scan {:?}..{:?} desc={} {}", after, before, desc, ctx);
                    }
                }
            }
            let mut times: Vec<i64> = keys.iter().map(|k| k.t).collect();
            times.dedup();
            for t in times {
                let at_t: Vec<&Item> = want.iter().copied().filter(|i| i.key(by).t == t).collect();
                let all: Vec<String> = at_t.iter().map(|i| i.id.clone()).collect();
                prop_assert_eq!(tx.ties(s, t, i64::MAX, usize::MAX)?, all.clone());
                let upto = at_t[0].key(by).seq;
                prop_assert_eq!(tx.ties(s, t, upto, usize::MAX)?, vec![all[0].clone()]);
                prop_assert_eq!(tx.ties(s, t, i64::MAX, 1)?, vec![all[0].clone()]);
            }
        }
    }
    for it in model {
        prop_assert_eq!(tx.item(row.id, &it.id)?, Some(it.clone()));
    }
    Ok(())
}

/// Scans, counts, ranks, positions and ties agree with a sorted list after random
/// publishes, updates and retractions in two feeds, across a store's bucket boundaries.
async fn reads_agree_with_a_model<S: Store>(open: Open<S>) {
    let rt = tokio::runtime::Handle::current();
    // The runner calls back synchronously; it runs on a blocking thread that may block on
    // the runtime for each case.
    let outcome = tokio::task::spawn_blocking(move || {
        let config = ProptestConfig { cases: 32, source_file: Some(file!()), ..ProptestConfig::default() };
        let ops = proptest::collection::vec(op(), 0..64);
        TestRunner::new(config)
            .run(&ops, |ops| {
                let s = open(None);
                rt.block_on(async {
                    for (row, model) in run_model(&s, &ops).await {
                        s.read_ok(move |tx| Ok(check_feed(tx, &row, &model))).await?;
                    }
                    Ok::<(), TestCaseError>(())
                })
            })
            .map_err(|e| e.to_string())
    })
    .await
    .expect("the runner does not panic");
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

// ----- writes: isolation and the change sink -----

/// A sink that keeps every batch of changes it is handed.
fn recording() -> (Arc<Mutex<Vec<Vec<Change>>>>, ChangeSink) {
    let seen: Arc<Mutex<Vec<Vec<Change>>>> = Arc::default();
    let keep = seen.clone();
    (seen, Box::new(move |changes| keep.lock().unwrap().push(changes)))
}

fn ids_of(seen: &Mutex<Vec<Vec<Change>>>) -> Vec<String> {
    seen.lock().unwrap().iter().flatten().map(|c| c.item.id.clone()).collect()
}

/// Publishes `id` into feed "f" (created on first use) the core's way, at time `now`.
fn publishing(id: &str, now: i64) -> impl FnOnce(&mut dyn WriteTx) -> Result<Item, FeedError> + Send + 'static {
    let id = id.to_string();
    move |tx| {
        let mut f = match tx.feed("f")? {
            Some(f) => f,
            None => tx.create_feed("f")?,
        };
        let e = entry(&id, Some("ann"), &["x"]);
        tx.publish(&mut f, id, e, now, Order::default())
    }
}

async fn a_failing_write_leaves_no_trace<S: Store>(open: Open<S>) {
    let (seen, sink) = recording();
    let s = open(Some(sink));
    s.write_ok(publishing("first", 10)).await;
    s.subscribe("f", sub("f", "f?order=modified", "alice@x/r", "1")).await;
    let before = s.everything("f").await;
    let calls = seen.lock().unwrap().len();
    // The closure's own error, after writes of every kind.
    let r = s
        .write(|tx| {
            let mut f = tx.feed("f")?.unwrap();
            tx.publish(&mut f, "ghost".into(), entry("ghost", None, &[]), 20, Order::default())?;
            tx.retract(&mut f, "first", 20, Order::default())?;
            let g = tx.create_feed("g")?;
            tx.put_subscription(g.id, &sub("g", "g?order=-created", "bob@y", "2"))?;
            tx.delete_subscriptions_of("alice@x/r")?;
            Err::<(), _>(FeedError::BadRequest("no".into()))
        })
        .await;
    assert_eq!(r, Err(FeedError::BadRequest("no".into())), "the caller gets the closure's error");
    assert_eq!(s.everything("f").await, before);
    assert_eq!(s.feed("g").await, None);
    // A store call that fails, after writes the closure made, fails the write the same way.
    let r = s
        .write(|tx| {
            publishing("ghost2", 30)(tx)?;
            Ok(tx.create_feed("f")?)
        })
        .await;
    assert!(matches!(r, Err(FeedError::Store(_))), "{r:?}");
    assert_eq!(s.everything("f").await, before);
    assert_eq!(seen.lock().unwrap().len(), calls, "a failed write's changes are not announced");
    // The store carries on.
    s.write_ok(publishing("second", 40)).await;
    assert_eq!(ids_of(&seen), ["first", "second"]);
    let (_, items, subs) = s.everything("f").await;
    assert_eq!(items.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), ["first", "second"]);
    assert_eq!(subs, before.2);
}

async fn changes_reach_the_sink_in_commit_order_before_the_writer_is_answered<S: Store>(open: Open<S>) {
    let (seen, sink) = recording();
    let s = open(Some(sink));
    s.write_ok(publishing("i0", 10)).await;
    assert_eq!(ids_of(&seen), ["i0"]);
    let view = NodeName::parse("f").unwrap().resolve(Order::default()).canonical();
    s.subscribe("f", sub("f", &view, "alice@x/r", "1")).await;
    assert_eq!(seen.lock().unwrap().len(), 1, "a write that emits nothing does not call the sink");
    for i in 1..5 {
        let id = format!("i{i}");
        let item = s.write_ok(publishing(&id, 10 + i)).await;
        let last = seen.lock().unwrap().last().cloned().expect("a batch");
        let change = last.last().expect("a change");
        assert_eq!((change.feed.as_str(), &change.item, change.created), ("f", &item, true));
        assert_eq!(change.views.len(), 1, "the subscribed view saw it: {change:?}");
        assert_eq!((change.views[0].view.as_str(), change.views[0].count), (view.as_str(), i as u64 + 1));
    }
    // Concurrent writers: each finds its change already handed over when it is answered,
    // and the changes arrive in the order the writes committed (the order they were stamped).
    let writers: Vec<_> = (0..32)
        .map(|i| {
            let (store, seen) = (s.store.clone(), seen.clone());
            tokio::spawn(async move {
                let id = format!("c{i}");
                store.write(publishing(&id, 100)).await.unwrap();
                assert!(ids_of(&seen).contains(&id), "{id} was announced before its writer was answered");
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let changes: Vec<Change> = seen.lock().unwrap().iter().flatten().cloned().collect();
    assert_eq!(changes.len(), 37);
    let seqs: Vec<i64> = changes.iter().map(|c| c.item.modified.seq).collect();
    assert_eq!(seqs, (1..=37).collect::<Vec<_>>(), "commit order");
    let counts: Vec<u64> = changes[1..].iter().map(|c| c.views[0].count).collect();
    assert_eq!(counts, (2..=37).collect::<Vec<_>>(), "each change counts the items committed before it");
}

// ----- every behaviour against every store -----

/// For each `name: open` store, a module `name` with one test per behaviour.
macro_rules! conformance {
    (stores { $($store:ident: $open:path),* $(,)? } behaviours $behaviours:tt) => {
        $( conformance!(@store $store $open $behaviours); )*
    };
    (@store $store:ident $open:path { $($behaviour:ident),* $(,)? }) => {
        mod $store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $behaviour() {
                    super::$behaviour($open).await
                }
            )*
        }
    };
}

conformance! {
    stores {
        sqlite_file: super::open_sqlite_file,
        sqlite_in_memory: super::open_sqlite_in_memory,
        memory: super::open_memory,
        postgres: super::open_postgres,
    }
    behaviours {
        feeds_are_created_listed_by_name_and_saved,
        items_round_trip_including_tombstones,
        scan_bounds_are_exclusive_also_at_time_boundaries,
        filters_restrict_scans_counts_ranks_positions_and_ties,
        updates_move_items_in_modified_order_and_replace_categories,
        subscriptions_upsert_list_and_delete,
        reads_agree_with_a_model,
        a_failing_write_leaves_no_trace,
        changes_reach_the_sink_in_commit_order_before_the_writer_is_answered,
        hub_subscriptions_renew_expire_and_delete,
        outbox_rows_follow_commits_in_order_and_are_pruned,
        source_states_are_saved_per_feed_and_replaced,
    }
}
