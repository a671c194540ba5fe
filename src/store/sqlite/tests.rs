//! Tests of the SQLite store: the trait's methods against plain expectations and a model,
//! and the writer's group commit, error isolation and shutdown.

use super::read::SqlTx;
use super::*;
use crate::feed::ports::{FeedRow, Scope, Subscription};
use crate::feed::{Change, Filter, Item, Key, OrderBy, Payload};
use proptest::prelude::*;
use std::sync::Mutex as StdMutex;
use std::time::Duration;

fn item(id: &str, c: (i64, i64), m: (i64, i64), author: Option<&str>, cats: &[&str]) -> Item {
    Item {
        id: id.into(),
        created: Key { t: c.0, seq: c.1 },
        modified: Key { t: m.0, seq: m.1 },
        author: author.map(Into::into),
        categories: cats.iter().map(|c| c.to_string()).collect(),
        atom_id: Some(format!("urn:{id}")),
        payload: Payload::Entry(format!("<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:{id}</id></entry>")),
    }
}

fn scope(feed: i64, by: OrderBy, filter: &Filter) -> Scope<'_> {
    Scope { feed, by, filter }
}

fn ids(items: &[Item]) -> Vec<&str> {
    items.iter().map(|i| i.id.as_str()).collect()
}

/// A migrated connection inside a transaction, for testing the SQL without the threads.
fn raw() -> Connection {
    let mut conn = Connection::open_in_memory().unwrap();
    schema::configure_writer(&conn).unwrap();
    schema::migrate(&mut conn).unwrap();
    conn.execute_batch("BEGIN").unwrap();
    conn
}

/// Inserts items the way the core does: the feed's counters follow.
fn publish(tx: &mut SqlTx<'_>, feed: &mut FeedRow, it: &Item) {
    tx.insert_item(feed.id, it).unwrap();
    feed.items += 1;
    feed.last_t = feed.last_t.max(it.modified.t);
    feed.last_mseq = it.modified.seq;
    tx.save_feed(feed).unwrap();
}

/// Feed "f" with: a@(10,1) by ann [x], b@(10,2) by bob [x,y], c@(10,3) [y], d@(20,4) by ann,
/// e@(30,5) by ann [x,x]; modified keys equal created keys.
fn sample(tx: &mut SqlTx<'_>) -> FeedRow {
    let mut f = tx.create_feed("f").unwrap();
    for it in [
        item("a", (10, 1), (10, 1), Some("ann"), &["x"]),
        item("b", (10, 2), (10, 2), Some("bob"), &["x", "y"]),
        item("c", (10, 3), (10, 3), None, &["y"]),
        item("d", (20, 4), (20, 4), Some("ann"), &[]),
        item("e", (30, 5), (30, 5), Some("ann"), &["x", "x"]),
    ] {
        publish(tx, &mut f, &it);
    }
    f
}

#[test]
fn feeds_are_created_listed_by_name_and_saved() {
    let conn = raw();
    let mut tx = SqlTx::new(&conn);
    for name in ["m", "a", "z", "b"] {
        tx.create_feed(name).unwrap();
    }
    assert!(tx.create_feed("a").is_err(), "names are unique");
    let names = |v: Vec<FeedRow>| v.into_iter().map(|f| f.name).collect::<Vec<_>>();
    assert_eq!(names(tx.feeds(None, 10).unwrap()), ["a", "b", "m", "z"]);
    assert_eq!(names(tx.feeds(Some("b"), 2).unwrap()), ["m", "z"]);
    assert_eq!(names(tx.feeds(Some("z"), 2).unwrap()), Vec::<String>::new());
    assert_eq!(tx.feeds(None, 0).unwrap(), vec![]);
    let mut m = tx.feed("m").unwrap().unwrap();
    assert_eq!((m.items, m.last_t, m.last_mseq), (0, 0, 0));
    m.items = 7;
    m.last_t = 1_700_000_000_000;
    m.last_mseq = 9;
    tx.save_feed(&m).unwrap();
    assert_eq!(tx.feed("m").unwrap(), Some(m.clone()));
    assert_eq!(tx.feed("nope").unwrap(), None);
    assert!(tx.save_feed(&FeedRow { id: 999, ..m }).is_err(), "saving an unknown feed is an error");
}

#[test]
fn items_round_trip_including_tombstones() {
    let conn = raw();
    let mut tx = SqlTx::new(&conn);
    let mut f = tx.create_feed("f").unwrap();
    let g = tx.create_feed("g").unwrap();
    let mut a = item("a", (5, 1), (5, 1), Some("ann"), &["x", "a:b", "x"]);
    a.atom_id = None;
    publish(&mut tx, &mut f, &a);
    assert_eq!(tx.item(f.id, "a").unwrap(), Some(a.clone()));
    assert_eq!(tx.item(g.id, "a").unwrap(), None, "items belong to one feed");
    assert_eq!(tx.item(f.id, "b").unwrap(), None);
    let tomb = Item {
        modified: Key { t: 6, seq: 2 },
        payload: Payload::Tombstone { atom_ref: "a".into(), when: 6 },
        ..a.clone()
    };
    tx.update_item(f.id, &a, &tomb).unwrap();
    let got = tx.item(f.id, "a").unwrap().unwrap();
    assert!(got.is_deleted());
    assert_eq!(got, tomb);
    // The same id in another feed is another item.
    tx.insert_item(g.id, &a).unwrap();
    assert_eq!(tx.item(g.id, "a").unwrap(), Some(a));
}

#[test]
fn scan_bounds_are_exclusive_also_at_time_boundaries() {
    let conn = raw();
    let mut tx = SqlTx::new(&conn);
    let f = sample(&mut tx);
    let all = Filter::default();
    let s = scope(f.id, OrderBy::Created, &all);
    let scan = |a: Option<Key>, b: Option<Key>, desc: bool, n: usize| ids(&tx.scan(s, a, b, desc, n).unwrap()).join("");
    assert_eq!(scan(None, None, false, 100), "abcde");
    assert_eq!(scan(None, None, true, 100), "edcba");
    assert_eq!(scan(None, None, false, 2), "ab");
    assert_eq!(scan(None, None, true, 2), "ed");
    assert_eq!(scan(None, None, false, 0), "");
    // Item keys are exclusive.
    assert_eq!(scan(Some(Key { t: 10, seq: 2 }), None, false, 100), "cde");
    assert_eq!(scan(None, Some(Key { t: 10, seq: 2 }), true, 100), "a");
    assert_eq!(scan(Some(Key { t: 10, seq: 1 }), Some(Key { t: 20, seq: 4 }), false, 100), "bc");
    assert_eq!(scan(Some(Key { t: 10, seq: 1 }), Some(Key { t: 20, seq: 4 }), true, 1), "c");
    // Start and end of a time: everything at that time is after / before it.
    assert_eq!(scan(Some(Key::start_of(10)), None, false, 100), "abcde");
    assert_eq!(scan(Some(Key::end_of(10)), None, false, 100), "de");
    assert_eq!(scan(None, Some(Key::start_of(10)), true, 100), "");
    assert_eq!(scan(None, Some(Key::end_of(10)), true, 100), "cba");
    assert_eq!(scan(Some(Key::start_of(10)), Some(Key::end_of(10)), false, 100), "abc");
    assert_eq!(scan(Some(Key::end_of(10)), Some(Key::start_of(30)), false, 100), "d");
    assert_eq!(scan(Some(Key::start_of(i64::MIN)), Some(Key::end_of(i64::MAX)), false, usize::MAX), "abcde");
    assert_eq!(scan(Some(Key::start_of(15)), Some(Key::end_of(25)), true, 100), "d");
    assert_eq!(scan(Some(Key::end_of(30)), None, false, 100), "");
    // Empty or inverted ranges are empty, not errors.
    assert_eq!(scan(Some(Key::end_of(20)), Some(Key::start_of(20)), false, 100), "");
}

#[test]
fn filters_restrict_scans_counts_ranks_positions_and_ties() {
    let conn = raw();
    let mut tx = SqlTx::new(&conn);
    let f = sample(&mut tx);
    let cases: [(Filter, &str); 5] = [
        (Filter::default(), "abcde"),
        (Filter { author: Some("ann".into()), category: None }, "ade"),
        (Filter { author: None, category: Some("x".into()) }, "abe"),
        (Filter { author: Some("ann".into()), category: Some("x".into()) }, "ae"),
        (Filter { author: Some("nobody".into()), category: None }, ""),
    ];
    for by in [OrderBy::Created, OrderBy::Modified] {
        for (filter, want) in &cases {
            let s = scope(f.id, by, filter);
            let got = tx.scan(s, None, None, false, 100).unwrap();
            assert_eq!(ids(&got).join(""), *want, "{filter:?} {by:?}");
            let down: String = ids(&tx.scan(s, None, None, true, 100).unwrap()).concat();
            assert_eq!(down, want.chars().rev().collect::<String>());
            assert_eq!(tx.count(s).unwrap(), want.len() as u64);
            for (i, it) in got.iter().enumerate() {
                let k = it.key(by);
                assert_eq!(tx.rank(s, k).unwrap(), i as u64, "{filter:?} {by:?} rank of {}", it.id);
                assert_eq!(tx.nth(s, i as u64).unwrap(), Some(k));
            }
            assert_eq!(tx.nth(s, want.len() as u64).unwrap(), None);
            assert_eq!(tx.nth(s, u64::MAX).unwrap(), None);
            assert_eq!(tx.rank(s, Key::end_of(i64::MAX)).unwrap(), want.len() as u64);
            assert_eq!(tx.rank(s, Key::start_of(i64::MIN)).unwrap(), 0);
            let at10: Vec<String> = got.iter().filter(|i| i.key(by).t == 10).map(|i| i.id.clone()).collect();
            assert_eq!(tx.ties(s, 10, i64::MAX, 100).unwrap(), at10);
            assert_eq!(tx.ties(s, 10, i64::MAX, 1).unwrap(), at10.iter().take(1).cloned().collect::<Vec<_>>());
            assert_eq!(tx.ties(s, 10, 1, 100).unwrap(), at10.iter().filter(|i| *i == "a").cloned().collect::<Vec<_>>());
            assert_eq!(tx.ties(s, 11, i64::MAX, 100).unwrap(), Vec::<String>::new());
        }
    }
    // Ranks of keys that are not items' keys: time bounds.
    let all = Filter::default();
    let s = scope(f.id, OrderBy::Created, &all);
    assert_eq!(tx.rank(s, Key::start_of(10)).unwrap(), 0);
    assert_eq!(tx.rank(s, Key::end_of(10)).unwrap(), 3);
    assert_eq!(tx.rank(s, Key::start_of(20)).unwrap(), 3);
    assert_eq!(tx.rank(s, Key::start_of(25)).unwrap(), 4);
    assert_eq!(tx.rank(s, Key::end_of(30)).unwrap(), 5);
}

#[test]
fn updates_move_items_in_modified_order_and_replace_categories() {
    let conn = raw();
    let mut tx = SqlTx::new(&conn);
    let mut f = sample(&mut tx);
    let old = tx.item(f.id, "a").unwrap().unwrap();
    let new = Item { modified: Key { t: 40, seq: 6 }, categories: vec!["z".into()], author: None, ..old.clone() };
    tx.update_item(f.id, &old, &new).unwrap();
    f.last_mseq = 6;
    tx.save_feed(&f).unwrap();
    let none = Filter::default();
    let by_mod = scope(f.id, OrderBy::Modified, &none);
    assert_eq!(ids(&tx.scan(by_mod, None, None, false, 10).unwrap()).concat(), "bcdea");
    assert_eq!(ids(&tx.scan(scope(f.id, OrderBy::Created, &none), None, None, false, 10).unwrap()).concat(), "abcde");
    assert_eq!(tx.count(by_mod).unwrap(), 5, "an update adds no item");
    assert_eq!(tx.rank(by_mod, new.modified).unwrap(), 4);
    assert_eq!(tx.nth(by_mod, 4).unwrap(), Some(new.modified));
    assert_eq!(tx.nth(by_mod, 0).unwrap(), Some(Key { t: 10, seq: 2 }));
    let x = Filter { author: None, category: Some("x".into()) };
    let z = Filter { author: None, category: Some("z".into()) };
    let ann = Filter { author: Some("ann".into()), category: None };
    assert_eq!(ids(&tx.scan(scope(f.id, OrderBy::Created, &x), None, None, false, 10).unwrap()).concat(), "be");
    assert_eq!(ids(&tx.scan(scope(f.id, OrderBy::Modified, &z), None, None, false, 10).unwrap()).concat(), "a");
    assert_eq!(ids(&tx.scan(scope(f.id, OrderBy::Created, &z), None, None, false, 10).unwrap()).concat(), "a");
    assert_eq!(ids(&tx.scan(scope(f.id, OrderBy::Modified, &ann), None, None, false, 10).unwrap()).concat(), "de");
    // Guards: the id and created key stay, and the item must exist.
    let moved = Item { created: Key { t: 1, seq: 9 }, ..new.clone() };
    assert!(tx.update_item(f.id, &new, &moved).is_err());
    let ghost = item("ghost", (1, 1), (50, 7), None, &[]);
    assert!(tx.update_item(f.id, &ghost, &ghost).is_err());
}

#[test]
fn subscriptions_upsert_list_and_delete() {
    let conn = raw();
    let mut tx = SqlTx::new(&conn);
    let f = tx.create_feed("f").unwrap();
    let g = tx.create_feed("g").unwrap();
    let sub = |node: &str, view: &str, jid: &str, subid: &str| Subscription {
        node: node.into(),
        view: view.into(),
        jid: jid.into(),
        subid: subid.into(),
    };
    let s1 = sub("f", "f?order=-created", "alice@x/phone", "1");
    let s2 = sub("f?order=modified", "f?order=modified", "alice@x", "2");
    let s3 = sub("f", "f?order=-created", "bob@y", "3");
    let s4 = sub("g", "g?order=-created", "alice@x/laptop", "4");
    for (feed, s) in [(f.id, &s1), (f.id, &s2), (f.id, &s3), (g.id, &s4)] {
        tx.put_subscription(feed, s).unwrap();
    }
    assert_eq!(tx.subscribed_views(f.id).unwrap(), ["f?order=-created", "f?order=modified"]);
    assert_eq!(tx.subscribers(f.id, "f?order=-created").unwrap(), vec![s1.clone(), s3.clone()]);
    assert_eq!(tx.subscription_count(f.id).unwrap(), 3);
    assert_eq!(tx.subscriptions_of("alice@x").unwrap(), vec![s1.clone(), s2.clone(), s4.clone()]);
    assert_eq!(tx.subscriptions_of("alice@x/phone").unwrap(), vec![]);
    // Same view and JID: replaced, not added.
    let s1b = sub("f?order=-created", "f?order=-created", "alice@x/phone", "9");
    tx.put_subscription(f.id, &s1b).unwrap();
    assert_eq!(tx.subscription_count(f.id).unwrap(), 3);
    assert_eq!(tx.subscribers(f.id, "f?order=-created").unwrap(), vec![s1b, s3]);
    assert!(tx.delete_subscription(f.id, "f?order=modified", "alice@x").unwrap());
    assert!(!tx.delete_subscription(f.id, "f?order=modified", "alice@x").unwrap());
    assert_eq!(tx.subscribed_views(f.id).unwrap(), ["f?order=-created"]);
    assert_eq!(tx.subscribed_views(g.id).unwrap(), ["g?order=-created"]);
    // All of one full JID's subscriptions, across feeds; other resources keep theirs.
    tx.put_subscription(g.id, &sub("g", "g?order=-created", "alice@x/phone", "5")).unwrap();
    assert_eq!(tx.delete_subscriptions_of("alice@x/phone").unwrap(), 2);
    assert_eq!(tx.delete_subscriptions_of("alice@x/phone").unwrap(), 0);
    assert_eq!(tx.subscriptions_of("alice@x").unwrap(), vec![s4]);
    assert_eq!(tx.subscription_count(f.id).unwrap(), 1);
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
    // Gaps up to 3000 cross level-1 buckets often; a rare huge gap crosses level 2.
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

/// Applies the ops to the store and to a plain list per feed, the core's way: created seqs
/// dense, times never going back, modified seqs growing with gaps.
fn run_model(tx: &mut SqlTx<'_>, ops: &[Op]) -> Vec<(FeedRow, Vec<Item>)> {
    let mut feeds: Vec<(FeedRow, Vec<Item>)> =
        ["f0", "f1"].iter().map(|n| (tx.create_feed(n).unwrap(), Vec::new())).collect();
    let mut now = 1_700_000_000_000i64;
    for op in ops {
        match *op {
            Op::Insert { feed, author, cats, dt, gap } => {
                now += dt;
                let (row, model) = &mut feeds[feed as usize % 2];
                row.last_t = row.last_t.max(now);
                row.last_mseq += gap;
                let it = Item {
                    id: format!("i{}", row.items),
                    created: Key { t: row.last_t, seq: row.items as i64 + 1 },
                    modified: Key { t: row.last_t, seq: row.last_mseq },
                    author: author_of(author),
                    categories: cats_of(cats),
                    atom_id: None,
                    payload: Payload::Entry("<entry/>".into()),
                };
                row.items += 1;
                tx.insert_item(row.id, &it).unwrap();
                tx.save_feed(row).unwrap();
                model.push(it);
            }
            Op::Update { feed, which, author, cats, tomb, dt, gap } => {
                now += dt;
                let (row, model) = &mut feeds[feed as usize % 2];
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
                tx.update_item(row.id, &old, &new).unwrap();
                tx.save_feed(row).unwrap();
                model[at] = new;
            }
        }
    }
    feeds
}

/// Checks every read of every scope of `feed` against the model's list.
fn check_feed(tx: &SqlTx<'_>, row: &FeedRow, model: &[Item]) -> Result<(), TestCaseError> {
    let filters = [
        Filter::default(),
        Filter { author: Some("a1".into()), category: None },
        Filter { author: None, category: Some("x".into()) },
        Filter { author: Some("a2".into()), category: Some("y".into()) },
    ];
    for by in [OrderBy::Created, OrderBy::Modified] {
        for filter in &filters {
            let s = scope(row.id, by, filter);
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
            // Bounds: none, every item key, and both ends of every time present.
            let mut bounds: Vec<Option<Key>> = vec![None];
            for (i, k) in keys.iter().enumerate() {
                bounds.push(Some(*k));
                // Every item's key is a bound; a sample of times is enough for time bounds.
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
                    let inside: Vec<&Item> = want
                        .iter()
                        .copied()
                        .filter(|i| after.is_none_or(|a| i.key(by) > a) && before.is_none_or(|z| i.key(by) < z))
                        .collect();
                    for (desc, limit) in [(false, 3), (true, 3), (j % 2 == 0, usize::MAX)] {
                        let got = tx.scan(s, after, before, desc, limit)?;
                        let mut exp: Vec<Item> = inside.iter().map(|i| (*i).clone()).collect();
                        if desc {
                            exp.reverse();
                        }
                        exp.truncate(limit);
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
        let got = tx.item(row.id, &it.id)?;
        prop_assert_eq!(got.as_ref(), Some(it));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Scans, counts, ranks, positions and ties agree with a sorted list after random
    /// publishes, updates and retractions in two feeds, across bucket boundaries.
    #[test]
    fn reads_agree_with_a_model(ops in proptest::collection::vec(op(), 0..64)) {
        let conn = raw();
        let mut tx = SqlTx::new(&conn);
        let feeds = run_model(&mut tx, &ops);
        for (row, model) in &feeds {
            check_feed(&tx, row, model)?;
        }
    }
}

// ----- the store: threads, batches, durability -----

fn temp_store(sink: Option<ChangeSink>) -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("t.db"), sink).unwrap();
    (dir, store)
}

/// A write that publishes the next item of feed `f`, stamped from the feed's counters.
async fn publish_one(store: &SqliteStore, id: String) -> Result<Item, FeedError> {
    store.write(publishing(id)).await
}

fn publishing(id: String) -> impl FnOnce(&mut dyn WriteTx) -> Result<Item, FeedError> + Send + 'static {
    move |tx| {
        let mut f = match tx.feed("f")? {
            Some(f) => f,
            None => tx.create_feed("f")?,
        };
        f.last_t = f.last_t.max(1_700_000_000_000);
        f.last_mseq += 1;
        f.items += 1;
        let it = item(&id, (f.last_t, f.items as i64), (f.last_t, f.last_mseq), None, &[]);
        tx.insert_item(f.id, &it)?;
        tx.save_feed(&f)?;
        tx.emit(Change { feed: "f".into(), item: it.clone(), created: true, views: vec![] });
        Ok(it)
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
    store.inner.send(Job::Write(Box::new(Pending::new(f, tx)))).unwrap();
    rx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_closure_leaves_no_trace_and_spares_its_batch() {
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
                let f = tx.feed("f")?.expect("feed");
                tx.insert_item(f.id, &item(&format!("bad{i}"), (1, 1000 + i), (1, 1000 + i), None, &[]))?;
                tx.emit(Change {
                    feed: "f".into(),
                    item: item("ghost", (1, 1), (1, 1), None, &[]),
                    created: true,
                    views: vec![],
                });
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
            Ok(tx.scan(
                Scope { feed: f.id, by: OrderBy::Created, filter: &Filter::default() },
                None,
                None,
                false,
                100,
            )?)
        })
        .await
        .unwrap();
    assert_eq!(ids(&items), ["first", "ok0", "ok2", "ok3", "ok5", "ok6"]);
    let seen = seen.lock().unwrap();
    let last = seen.last().unwrap();
    assert_eq!(last.iter().map(|c| c.item.id.as_str()).collect::<Vec<_>>(), ["ok0", "ok2", "ok3", "ok5", "ok6"]);
    assert!(seen.iter().flatten().all(|c| c.item.id != "ghost"), "a failed closure's changes are dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_closure_is_contained() {
    for store in [temp_store(None).1, SqliteStore::open_in_memory(None).unwrap()] {
        publish_one(&store, "a".into()).await.unwrap();
        let r = store
            .write(|tx| -> Result<(), FeedError> {
                let f = tx.feed("f")?.expect("feed");
                tx.insert_item(f.id, &item("p", (1, 99), (1, 99), None, &[]))?;
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
async fn changes_reach_the_sink_before_the_writer_is_answered() {
    let seen: Arc<StdMutex<Vec<String>>> = Arc::default();
    let sink_seen = seen.clone();
    let store = SqliteStore::open_in_memory(Some(Box::new(move |changes| {
        sink_seen.lock().unwrap().extend(changes.into_iter().map(|c| c.item.id))
    })))
    .unwrap();
    for i in 0..5 {
        let id = format!("i{i}");
        publish_one(&store, id.clone()).await.unwrap();
        assert_eq!(seen.lock().unwrap().last(), Some(&id));
    }
    // A write that emits nothing does not call the sink.
    store.write(|_| Ok(())).await.unwrap();
    assert_eq!(seen.lock().unwrap().len(), 5);
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
            (c.query_row("PRAGMA journal_mode", [], |r| r.get(0)).map_err(|e| StoreError::from(e).into()), true)
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
            store.inner.send(Job::Write(Box::new(Pending::new(publishing(format!("d{i}")), tx)))).unwrap();
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
