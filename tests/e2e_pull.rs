//! End to end, pulling (SPEC §3 and §4): a real XMPP server (Prosody or
//! ejabberd, see `crates/testkit/src/server/select.rs`), the real `smartfeeds` binary, and a
//! feed seeded once per test binary with 320 items in four waves (300 new, 43 updated,
//! 30 retracted, 20 new), read back by clients through every view order and filtered views.
//!
//! Publishes within a wave are pipelined, so their relative order is the service's to pick;
//! between waves it is fixed (a wave starts once the previous one is acknowledged). The
//! reference listings are read from the service once and checked against what the waves
//! fix; every other way of paging must then agree with them exactly.

use std::collections::{HashMap, HashSet};

use testkit::Client;
use testkit::fixture::{Fixture, Shared};
use testkit::mam::{MamAnswer, MamQuery, mam, mam_pages};
use testkit::pubsub::*;
use testkit::server::COMPONENT_DOMAIN;

const FEED: &str = "pull";
const TABLES: &str = r#"
[limits]
default_page = 20
max_page = 200

[[feeds]]
name = "pull"
title = "Pull test feed"
publishers = ["bot@localhost"]
"#;
const DEFAULT_PAGE: usize = 20;
const MAX_PAGE: usize = 200;
/// The author of the last wave: non-ASCII and `&`, so filters need percent-encoding.
const ZOE: &str = "Zoë & Co";
const ZOE_NODE: &str = "pull?author=Zo%C3%AB%20%26%20Co";

/// What the seeding published, per item.
#[derive(Clone, Debug)]
struct Meta {
    atom_id: String,
    author: Option<String>,
    categories: Vec<String>,
    updated: bool,
    retracted: bool,
}

struct Seed {
    wave1: Vec<String>,
    wave4: Vec<String>,
    meta: HashMap<String, Meta>,
    /// Wall clock (ms) before the first retraction was sent and after the last was acked.
    retract_window: (i64, i64),
    /// The reference listings, ascending.
    created: Vec<String>,
    modified: Vec<String>,
    /// The items of the created listing, with their payloads.
    created_items: Vec<PageItem>,
}

static SEED: Shared<(Fixture, Seed)> = Shared::new();

/// The seeded feed: one server, one smartfeeds, published once per test binary.
fn seed() -> &'static Seed {
    &shared().1
}

fn shared() -> &'static (Fixture, Seed) {
    SEED.get_or_start(|| {
        let fx = Fixture::start(TABLES);
        let seed = block_on_thread(publish_waves(&fx));
        (fx, seed)
    })
}

fn a_id(k: usize) -> String {
    format!("a{k:03}")
}

async fn publish_waves(fx: &Fixture) -> Seed {
    let mut bot = fx.server.login("bot").await;
    let mut meta = HashMap::new();
    let wave1: Vec<String> = (0..300).map(a_id).collect();
    let wave4: Vec<String> = (0..20).map(|k| format!("z{k:02}")).collect();
    for (k, id) in wave1.iter().enumerate() {
        let author = match (k % 50, k % 3) {
            (49, _) => None,
            (_, 0) => Some("ann"),
            (_, 1) => Some("ben"),
            _ => Some("cat"),
        };
        let mut categories = vec![if k % 2 == 0 { "even" } else { "odd" }];
        if k % 5 == 0 {
            categories.push("fizz");
        }
        meta.insert(
            id.clone(),
            Meta {
                atom_id: format!("urn:smartfeeds-test:{id}"),
                author: author.map(String::from),
                categories: categories.iter().map(|c| c.to_string()).collect(),
                updated: k % 7 == 3,
                retracted: k % 10 == 5,
            },
        );
    }
    for id in &wave4 {
        meta.insert(
            id.clone(),
            Meta {
                atom_id: format!("urn:smartfeeds-test:{id}"),
                author: Some(ZOE.into()),
                categories: vec!["fizz".into(), "late".into()],
                updated: false,
                retracted: false,
            },
        );
    }
    let payload = |id: &str, version: u32| {
        let m = &meta[id];
        let cats: Vec<&str> = m.categories.iter().map(String::as_str).collect();
        entry(&m.atom_id, &format!("{id} v{version}"), m.author.as_deref(), &cats)
    };
    let publish = |ids: &[String], version: u32| -> Vec<_> {
        ids.iter().map(|id| publish_iq(FEED, Some(id), &payload(id, version))).collect()
    };
    let check = |what: &str, replies: Vec<minidom::Element>| {
        for r in replies {
            assert_eq!(testkit::stanza_type(&r), "result", "{what}: {}", testkit::to_xml(&r));
        }
    };

    check("wave 1", iq_all(&mut bot, publish(&wave1, 1)).await);
    let updated: Vec<String> = wave1.iter().filter(|id| meta[*id].updated).cloned().collect();
    check("updates", iq_all(&mut bot, publish(&updated, 2)).await);
    let retracted: Vec<String> = wave1.iter().filter(|id| meta[*id].retracted).cloned().collect();
    let start = now_ms();
    check("retractions", iq_all(&mut bot, retracted.iter().map(|id| retract_iq(FEED, id)).collect()).await);
    let retract_window = (start, now_ms());
    check("wave 4", iq_all(&mut bot, publish(&wave4, 1)).await);
    let created = walk(&mut bot, "pull?order=created", MAX_PAGE).await;
    let modified = walk(&mut bot, "pull?order=modified", MAX_PAGE).await;
    bot.close().await;
    Seed {
        wave1,
        wave4,
        meta,
        retract_window,
        created: created.iter().map(|i| i.id.clone()).collect(),
        modified: modified.iter().map(|i| i.id.clone()).collect(),
        created_items: created,
    }
}

/// A view of the seeded feed and the items it must show.
struct ViewSpec {
    node: &'static str,
    by_modified: bool,
    descending: bool,
    author: Option<&'static str>,
    category: Option<&'static str>,
}

const VIEWS: [ViewSpec; 9] = [
    ViewSpec { node: "pull?order=created", by_modified: false, descending: false, author: None, category: None },
    ViewSpec { node: "pull?order=-created", by_modified: false, descending: true, author: None, category: None },
    ViewSpec { node: "pull?order=modified", by_modified: true, descending: false, author: None, category: None },
    ViewSpec { node: "pull?order=-modified", by_modified: true, descending: true, author: None, category: None },
    // The feed's default order is -created.
    ViewSpec { node: "pull", by_modified: false, descending: true, author: None, category: None },
    ViewSpec {
        node: "pull?author=ann&order=created",
        by_modified: false,
        descending: false,
        author: Some("ann"),
        category: None,
    },
    ViewSpec {
        node: "pull?category=fizz&order=-modified",
        by_modified: true,
        descending: true,
        author: None,
        category: Some("fizz"),
    },
    ViewSpec {
        node: "pull?order=modified&author=ben&category=even",
        by_modified: true,
        descending: false,
        author: Some("ben"),
        category: Some("even"),
    },
    ViewSpec { node: ZOE_NODE, by_modified: false, descending: true, author: Some(ZOE), category: None },
];

impl Seed {
    /// The ids a view shows, in its order.
    fn expected(&self, v: &ViewSpec) -> Vec<String> {
        let base = if v.by_modified { &self.modified } else { &self.created };
        let mut ids: Vec<String> = base
            .iter()
            .filter(|id| {
                let m = &self.meta[*id];
                v.author.is_none_or(|a| m.author.as_deref() == Some(a))
                    && v.category.is_none_or(|c| m.categories.iter().any(|t| t == c))
            })
            .cloned()
            .collect();
        if v.descending {
            ids.reverse();
        }
        ids
    }

    fn view(&self, node: &str) -> &'static ViewSpec {
        VIEWS.iter().find(|v| v.node == node).unwrap_or_else(|| panic!("no view {node}"))
    }
}

async fn login(name: &str) -> Client {
    shared().0.server.login(name).await
}

/// Pulls, checks the reply echoes the node, returns the page.
async fn get(conn: &mut testkit::Connection, request: &Pull) -> Page {
    let page = pull(conn, request).await;
    assert_eq!(page.node, request.node, "the reply names the node as written: {}", page.raw);
    page
}

/// One item per index (`<index>i</index><max>1</max>`, pipelined): the ids and cursors of
/// the whole view, in order.
async fn item_cursors(conn: &mut testkit::Connection, node: &str, count: usize) -> Vec<(String, Cursor)> {
    let iqs = (0..count).map(|i| Pull::node(node).max(1).index(i).iq()).collect();
    let replies = iq_all(conn, iqs).await;
    replies
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let page = parse_page(r);
            assert_eq!(page.items.len(), 1, "index {i} of {node}: {}", page.raw);
            assert_eq!(page.first_index, Some(i as u64), "index {i} of {node}: {}", page.raw);
            assert_eq!(page.first, page.last, "a one-item page starts and ends at the item: {}", page.raw);
            (page.items[0].id.clone(), page.first_cursor())
        })
        .collect()
}

/// The reference listings hold every item once, in an order the publish waves allow, with
/// the current payloads.
fn check_reference_listings(s: &Seed) {
    let all: HashSet<&String> = s.meta.keys().collect();
    for (name, listing) in [("created", &s.created), ("modified", &s.modified)] {
        assert_eq!(listing.len(), 320, "{name}: every item once, tombstones included");
        assert_eq!(listing.iter().collect::<HashSet<_>>(), all, "{name}: exactly the published ids");
    }

    // created: wave 1, then wave 4; updates and retractions move nothing.
    let head: HashSet<&String> = s.created[..300].iter().collect();
    assert_eq!(head, s.wave1.iter().collect(), "wave 1 comes first in created order");
    assert_eq!(s.created[300..].iter().collect::<HashSet<_>>(), s.wave4.iter().collect());

    // modified: untouched, updated (not retracted), retracted, wave 4.
    let group = |id: &String| {
        let m = &s.meta[id];
        if id.starts_with('z') {
            3
        } else if m.retracted {
            2
        } else if m.updated {
            1
        } else {
            0
        }
    };
    let groups: Vec<u8> = s.modified.iter().map(group).collect();
    assert!(groups.windows(2).all(|w| w[0] <= w[1]), "modified order follows the waves: {:?}", s.modified);
    assert_eq!(groups.iter().filter(|g| **g == 0).count(), 231);
    assert_eq!(groups.iter().filter(|g| **g == 1).count(), 39);
    assert_eq!(groups.iter().filter(|g| **g == 2).count(), 30);
    // Items never modified after creation keep their relative created order.
    let untouched_created: Vec<&String> = s.created.iter().filter(|id| matches!(group(id), 0 | 3)).collect();
    let untouched_modified: Vec<&String> = s.modified.iter().filter(|id| matches!(group(id), 0 | 3)).collect();
    assert_eq!(untouched_created, untouched_modified);

    // Payloads: current entries, tombstones for retracted items.
    let (start, end) = s.retract_window;
    for item in &s.created_items {
        let m = &s.meta[&item.id];
        let raw = format!("{:?}", item.payload.as_ref().map(testkit::to_xml));
        if m.retracted {
            let t = item.tombstone().unwrap_or_else(|| panic!("{} is retracted: {raw}", item.id));
            assert_eq!(t.attr("ref"), Some(m.atom_id.as_str()), "tombstone ref is the atom:id: {raw}");
            let when = t.attr("when").and_then(parse_rfc3339).unwrap_or_else(|| panic!("when is RFC 3339: {raw}"));
            assert!(start - 20 <= when && when <= end + 20, "retracted between {start} and {end}: {raw}");
            assert!(item.entry().is_none());
        } else {
            let e = item.entry().unwrap_or_else(|| panic!("{} has its Atom entry: {raw}", item.id));
            assert_eq!(e.get_child("id", ATOM).map(|i| i.text()), Some(m.atom_id.clone()), "{raw}");
            let version = if m.updated { 2 } else { 1 };
            assert_eq!(item.title(), Some(format!("{} v{version}", item.id)), "the current version: {raw}");
        }
    }
}

/// Pages through a view forward (after `<last>`) and backward (before `<first>`, from an
/// empty `<before/>`), and between two cursors.
async fn walk_both_ways(alice: &mut testkit::Connection, s: &Seed, v: &ViewSpec, max: usize) {
    let expected = s.expected(v);
    let n = expected.len();
    assert!(n >= 20, "{}: the seed fills every view ({n})", v.node);
    let count = Some(n as u64);

    // Forward, after the previous page's <last>.
    let mut seen = Vec::new();
    let mut request = Pull::node(v.node).max(max);
    let mut previous_last: Option<Cursor> = None;
    loop {
        let page = get(alice, &request).await;
        assert_eq!(page.count, count, "{}: <count> is the view's size: {}", v.node, page.raw);
        if page.items.is_empty() {
            assert_eq!((page.first.as_ref(), page.last.as_ref()), (None, None), "empty page: count only: {}", page.raw);
            break;
        }
        let pos = seen.len();
        assert_eq!(page.first_index, Some(pos as u64), "{}: <first index>: {}", v.node, page.raw);
        let want = &expected[pos..(pos + max).min(n)];
        assert_eq!(page.ids(), want, "{}: page at {pos} going forward", v.node);
        let (first, last) = (page.first_cursor(), page.last_cursor());
        if let Some(prev) = previous_last {
            if v.descending {
                assert!(first.t <= prev.t, "{}: cursor times follow the view order: {}", v.node, page.raw);
            } else {
                assert!(first.t >= prev.t, "{}: cursor times follow the view order: {}", v.node, page.raw);
            }
        }
        previous_last = Some(last);
        seen.extend(page.ids());
        request = Pull::node(v.node).max(max).after(&last.spec());
    }
    assert_eq!(seen, expected, "{}: forward paging", v.node);

    // Backward from the last page (empty <before/>), before the previous page's <first>.
    let mut pages: Vec<Vec<String>> = Vec::new();
    let mut end = n;
    let mut request = Pull::node(v.node).max(max).before("");
    loop {
        let page = get(alice, &request).await;
        assert_eq!(page.count, count, "{}: {}", v.node, page.raw);
        if page.items.is_empty() {
            assert_eq!(end, 0, "{}: only the page before the first is empty: {}", v.node, page.raw);
            break;
        }
        let start = end.saturating_sub(max);
        assert_eq!(page.first_index, Some(start as u64), "{}: true index also backwards: {}", v.node, page.raw);
        assert_eq!(page.ids(), &expected[start..end], "{}: page ending at {end}, in view order", v.node);
        pages.push(page.ids());
        end = start;
        request = Pull::node(v.node).max(max).before(page.first.as_deref().expect("first"));
    }
    let backwards: Vec<String> = pages.into_iter().rev().flatten().collect();
    assert_eq!(backwards, expected, "{}: backward paging", v.node);

    // Both after and before: the items between them.
    let end = (n - 3).min(60);
    let a = get(alice, &Pull::node(v.node).max(1).index(2)).await;
    let b = get(alice, &Pull::node(v.node).max(1).index(end)).await;
    let request = Pull::node(v.node).max(100).after(a.last.as_deref().unwrap()).before(b.first.as_deref().unwrap());
    let between = get(alice, &request).await;
    assert_eq!(between.ids(), &expected[3..end], "{}: after + before", v.node);
    assert_eq!(between.first_index, Some(3));
}

#[tokio::test]
async fn every_item_once_in_every_view_forward_and_backward() {
    let s = seed();
    check_reference_listings(s);
    let mut alice = login("alice").await;
    // "pull" is "pull?order=-created" under another name; see page_sizes_lookups_and_filters.
    for (v, max) in VIEWS.iter().filter(|v| v.node != FEED).zip([7, 11, 13, 7, 5, 6, 7, 3]) {
        walk_both_ways(&mut alice, s, v, max).await;
    }
    alice.close().await;
}

/// Every item's cursor (from one-item pages at each index) is T_O_C as SPEC §3 defines it;
/// returns them, in view order.
async fn check_cursors(bob: &mut testkit::Connection, s: &Seed, node: &str) -> Vec<(String, Cursor)> {
    let expected = s.expected(s.view(node));
    let cursors = item_cursors(bob, node, expected.len()).await;
    let ids: Vec<String> = cursors.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(ids, expected, "{node}: <index>i</index> is the i-th item");
    let mut group_start = 0;
    for (i, (id, c)) in cursors.iter().enumerate() {
        if i > 0 {
            let prev = cursors[i - 1].1;
            assert!(c.t >= prev.t, "{node}: T ascends along the view at {id}: {prev:?} then {c:?}");
            if c.t != prev.t {
                group_start = i;
            }
        }
        assert_eq!(c.o, (i - group_start) as u64, "{node}: O of {id} is its offset among the items at T");
        let joined = ids[group_start..=i].join("_");
        assert_eq!(c.c, crc32fast::hash(joined.as_bytes()), "{node}: C of {id} is CRC32({joined:?})");
    }
    // Times of the created view are within the seeding; the last wave is the newest.
    if node == "pull?order=created" {
        let (_, retracted_by) = s.retract_window;
        assert!(cursors[300].1.t >= retracted_by - 20, "wave 4 was created after the retractions");
    }
    // An index at or past the count: an empty page with the count.
    for i in [expected.len(), expected.len() + 10] {
        let page = get(bob, &Pull::node(node).max(5).index(i)).await;
        assert!(page.items.is_empty(), "{node}: index {i}: {}", page.raw);
        assert_eq!(page.count, Some(expected.len() as u64));
        assert_eq!(page.first, None);
    }
    cursors
}

/// `time:` and `id:` specs in an ascending view and its descending twin; `cursors` are the
/// ascending view's, from [`check_cursors`].
async fn check_time_and_id_specs(alice: &mut testkit::Connection, s: &Seed, node: &str, cursors: &[(String, Cursor)]) {
    let asc = s.expected(s.view(node));
    let t_of: HashMap<&str, i64> = cursors.iter().map(|(id, c)| (id.as_str(), c.t)).collect();
    let desc_node = node.replace("order=", "order=-");
    let desc: Vec<String> = asc.iter().rev().cloned().collect();
    let n = asc.len();
    for pivot in [0, 1, 57, 150, 231, 280, n - 1] {
        let t = cursors[pivot].1.t;
        let spec = format!("time:{}", rfc3339(t));
        // Ascending: "after" starts at the first item at T (inclusive), "before" ends at
        // the last item at T (inclusive).
        let from = asc.iter().position(|id| t_of[id.as_str()] >= t).unwrap();
        let page = get(alice, &Pull::node(node).max(5).after(&spec)).await;
        assert_eq!(page.ids(), &asc[from..(from + 5).min(n)], "{node} after {spec}");
        assert_eq!(page.first_index, Some(from as u64), "{node} after {spec}: {}", page.raw);
        let to = asc.iter().rposition(|id| t_of[id.as_str()] <= t).unwrap() + 1;
        let page = get(alice, &Pull::node(node).max(5).before(&spec)).await;
        assert_eq!(page.ids(), &asc[to.saturating_sub(5)..to], "{node} before {spec}");
        // Descending: "after T" means at T and older, newest first.
        let from = desc.iter().position(|id| t_of[id.as_str()] <= t).unwrap();
        let page = get(alice, &Pull::node(&desc_node).max(5).after(&spec)).await;
        assert_eq!(page.ids(), &desc[from..(from + 5).min(n)], "{desc_node} after {spec}");
        let to = desc.iter().rposition(|id| t_of[id.as_str()] >= t).unwrap() + 1;
        let page = get(alice, &Pull::node(&desc_node).max(5).before(&spec)).await;
        assert_eq!(page.ids(), &desc[to.saturating_sub(5)..to], "{desc_node} before {spec}");

        // The same instant in another offset is the same time.
        let shifted = chrono::DateTime::from_timestamp_millis(t)
            .unwrap()
            .with_timezone(&chrono::FixedOffset::east_opt(2 * 3600 + 30 * 60).unwrap())
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, false);
        let page = get(alice, &Pull::node(node).max(5).after(&format!("time:{shifted}"))).await;
        let from = asc.iter().position(|id| t_of[id.as_str()] >= t).unwrap();
        assert_eq!(page.ids(), &asc[from..(from + 5).min(n)], "{node} after time:{shifted}");

        // id: the item's current position, exclusive.
        let id = &asc[pivot];
        let page = get(alice, &Pull::node(node).max(5).after(&format!("id:{id}"))).await;
        assert_eq!(page.ids(), &asc[(pivot + 1).min(n)..(pivot + 6).min(n)], "{node} after id:{id}");
        let page = get(alice, &Pull::node(node).max(5).before(&format!("id:{id}"))).await;
        assert_eq!(page.ids(), &asc[pivot.saturating_sub(5)..pivot], "{node} before id:{id}");
        let page = get(alice, &Pull::node(&desc_node).max(5).after(&format!("id:{id}"))).await;
        let dpos = n - 1 - pivot;
        assert_eq!(page.ids(), &desc[(dpos + 1).min(n)..(dpos + 6).min(n)], "{desc_node} after id:{id}");
    }
    // Between two ids.
    let page = get(
        alice,
        &Pull::node(node).max(MAX_PAGE).after(&format!("id:{}", asc[10])).before(&format!("id:{}", asc[40])),
    )
    .await;
    assert_eq!(page.ids(), &asc[11..40], "{node}: between two ids");

    // Times before and after everything.
    let early = "time:1970-01-01T00:00:00Z";
    let page = get(alice, &Pull::node(node).max(3).after(early)).await;
    assert_eq!(page.ids(), &asc[..3], "{node} after {early}");
    let page = get(alice, &Pull::node(node).max(3).before(early)).await;
    assert!(page.items.is_empty(), "{node}: nothing before {early}: {}", page.raw);
    assert_eq!(page.count, Some(n as u64));
    let late = format!("time:{}", rfc3339(now_ms() + 86_400_000));
    let page = get(alice, &Pull::node(node).max(3).after(&late)).await;
    assert!(page.items.is_empty(), "{node}: nothing after {late}: {}", page.raw);
    let page = get(alice, &Pull::node(node).max(3).before(&late)).await;
    assert_eq!(page.ids(), &asc[n - 3..], "{node} before {late}");
}

/// A cursor whose checksum fails is read as `time:T`; `cursors` are the created view's.
async fn check_checksum_fallback(alice: &mut testkit::Connection, s: &Seed, cursors: &[(String, Cursor)]) {
    let node = "pull?order=created";
    let asc = s.expected(s.view(node));
    let n = asc.len();
    let t_of: HashMap<&str, i64> = cursors.iter().map(|(id, c)| (id.as_str(), c.t)).collect();
    // Prefer an item with others before it at the same time: the fallback repeats them too.
    let pick = cursors.iter().position(|(_, c)| c.o >= 1).unwrap_or(n / 2);
    let (id, good) = cursors[pick].clone();
    let group_start = asc.iter().position(|i| t_of[i.as_str()] >= good.t).unwrap();
    assert!(group_start <= pick);

    // The good cursor resumes right after the item.
    let page = get(alice, &Pull::node(node).max(10).after(&good.spec())).await;
    assert_eq!(page.ids(), &asc[pick + 1..(pick + 11).min(n)], "after the cursor of {id}");

    // A wrong checksum or offset: treated as time:T, so the items at T come again, none missed.
    let bad_c = Cursor { c: good.c.wrapping_add(1), ..good };
    let bad_o = Cursor { o: good.o + 1000, ..good };
    for bad in [bad_c, bad_o] {
        let page = get(alice, &Pull::node(node).max(10).after(&bad.spec())).await;
        assert_eq!(page.ids(), &asc[group_start..(group_start + 10).min(n)], "after {} (for {id})", bad.spec());
        assert!(page.ids().contains(&id), "the item itself is seen again: {}", page.raw);
        let page = get(alice, &Pull::node(node).max(10).before(&bad.spec())).await;
        let to = asc.iter().rposition(|i| t_of[i.as_str()] <= good.t).unwrap() + 1;
        assert_eq!(page.ids(), &asc[to.saturating_sub(10)..to], "before {}", bad.spec());
    }

    // The same in a descending view, with a cursor that view handed out.
    let desc_node = "pull?order=-created";
    let desc: Vec<String> = asc.iter().rev().cloned().collect();
    let dpos = n - 1 - pick;
    let one = get(alice, &Pull::node(desc_node).max(1).index(dpos)).await;
    assert_eq!(one.ids(), std::slice::from_ref(&id));
    let dgood = one.first_cursor();
    assert_eq!(dgood.t, good.t, "an item's T does not depend on the direction");
    let page = get(alice, &Pull::node(desc_node).max(10).after(&dgood.spec())).await;
    assert_eq!(page.ids(), &desc[dpos + 1..(dpos + 11).min(n)]);
    let dbad = Cursor { c: dgood.c ^ 0x5555_5555, ..dgood };
    let from = desc.iter().position(|i| t_of[i.as_str()] <= good.t).unwrap();
    // Descending, the item comes last of its millisecond: the page must reach it, however
    // many items were published in that millisecond.
    let max = (dpos - from + 1).max(10);
    let page = get(alice, &Pull::node(desc_node).max(max).after(&dbad.spec())).await;
    assert_eq!(page.ids(), &desc[from..(from + max).min(n)], "{desc_node} after {}", dbad.spec());
    assert!(page.ids().contains(&id), "{}", page.raw);

    // A well-formed cursor at a time with no items at all: also just a time.
    let gap = Cursor { t: 1_000, o: 0, c: 12345 };
    let page = get(alice, &Pull::node(node).max(4).after(&gap.spec())).await;
    assert_eq!(page.ids(), &asc[..4]);
}

#[tokio::test]
async fn cursors_and_position_specs() {
    let s = seed();
    let mut bob = login("bob").await;
    let created = check_cursors(&mut bob, s, "pull?order=created").await;
    let modified = check_cursors(&mut bob, s, "pull?order=modified").await;
    check_cursors(&mut bob, s, "pull?author=ann&order=created").await;
    check_time_and_id_specs(&mut bob, s, "pull?order=created", &created).await;
    check_time_and_id_specs(&mut bob, s, "pull?order=modified", &modified).await;
    check_checksum_fallback(&mut bob, s, &created).await;
    bob.close().await;
}

/// Default and clamped page sizes, `max=0`, `<index>`, `max_items`.
async fn check_page_sizes(bob: &mut testkit::Connection, s: &Seed) {
    let newest_first = s.expected(s.view("pull"));

    // No RSM: the first page of the default order, default size, with a <set>.
    let page = get(bob, &Pull::node(FEED)).await;
    assert!(page.has_set, "a <set> also without RSM: {}", page.raw);
    assert_eq!(page.ids(), &newest_first[..DEFAULT_PAGE]);
    assert_eq!((page.first_index, page.count), (Some(0), Some(320)));
    // An empty <set/> is the same.
    let page = get(bob, &Pull { empty_set: true, ..Pull::node(FEED) }).await;
    assert_eq!(page.ids(), &newest_first[..DEFAULT_PAGE]);

    // max above max_page: clamped; paging on from there works.
    let page = get(bob, &Pull::node(FEED).max(1000)).await;
    assert_eq!(page.ids(), &newest_first[..MAX_PAGE], "max 1000 is clamped to max_page");
    assert_eq!(page.count, Some(320));
    let next = get(bob, &Pull::node(FEED).max(1000).after(page.last.as_deref().unwrap())).await;
    assert_eq!(next.ids(), &newest_first[MAX_PAGE..]);
    assert_eq!(next.first_index, Some(MAX_PAGE as u64));

    // max=0: the count only, also after a position and in filtered views.
    for v in &VIEWS {
        let n = s.expected(v).len() as u64;
        for request in [Pull::node(v.node).max(0), Pull::node(v.node).max(0).after("time:1970-01-01T00:00:00Z")] {
            let page = get(bob, &request).await;
            assert!(page.items.is_empty(), "max=0 returns no items: {}", page.raw);
            assert_eq!(page.count, Some(n), "{}: count: {}", v.node, page.raw);
            assert_eq!((page.first.as_ref(), page.last.as_ref()), (None, None), "{}", page.raw);
        }
    }

    // <index>: the page starting there, in any view.
    for v in &VIEWS {
        let expected = s.expected(v);
        let i = expected.len() / 2;
        let page = get(bob, &Pull::node(v.node).max(4).index(i)).await;
        assert_eq!(page.ids(), &expected[i..i + 4], "{} index {i}", v.node);
        assert_eq!(page.first_index, Some(i as u64));
    }

    // max_items: the n most recent (by the view's time), newest first, with the <set/> an
    // RSM page has: the newest is <first>, at index 0.
    for v in &VIEWS {
        let newest = newest_first_of(s, v);
        let page = get(bob, &Pull::node(v.node).max_items(5)).await;
        assert_eq!(page.ids(), &newest[..5], "{} max_items=5", v.node);
        assert_eq!((page.first_index, page.count), (Some(0), Some(newest.len() as u64)), "{}", page.raw);
        assert!(page.first.is_some() && page.last.is_some(), "{}", page.raw);
    }
    let page = get(bob, &Pull::node(ZOE_NODE).max_items(50)).await;
    assert_eq!(page.ids(), newest_first_of(s, s.view(ZOE_NODE)), "max_items above the count: all of them");
}

/// A view's items newest first (by the view's time), as `max_items` requests read it.
fn newest_first_of(s: &Seed, v: &ViewSpec) -> Vec<String> {
    let mut ids = s.expected(v);
    if !v.descending {
        ids.reverse();
    }
    ids
}

/// Movim's paging (a `max_items` request, then `<before>` the page's `<last>` for older
/// posts and `<after>` its `<first>` for newer ones, as on ejabberd's SQL backend): back to
/// the oldest item and forward again to the newest, every item once, in every view.
#[tokio::test]
async fn movim_pages_back_in_time_and_forward_again() {
    let s = seed();
    let mut bob = login("bob").await;
    const N: usize = 10;
    for v in &VIEWS {
        let newest = newest_first_of(s, v);
        let count = Some(newest.len() as u64);
        // Back in time: the first page, then <before> each page's <last>.
        let mut page = get(&mut bob, &Pull::node(v.node).max_items(N)).await;
        // Each page's ids and <first>.
        let mut back: Vec<(Vec<String>, String)> = Vec::new();
        while !page.items.is_empty() {
            assert!(back.len() <= newest.len() / N, "{}: more pages than items allow: {}", v.node, page.raw);
            assert_eq!(page.count, count, "{}: <count> on every page: {}", v.node, page.raw);
            let at = back.iter().map(|(ids, _)| ids.len()).sum::<usize>() as u64;
            assert_eq!(page.first_index, Some(at), "{}: <first index> counts from the newest: {}", v.node, page.raw);
            let first = page.first.clone().unwrap_or_else(|| panic!("a <first>: {}", page.raw));
            back.push((page.ids(), first));
            let last = page.last.clone().unwrap_or_else(|| panic!("a <last>: {}", page.raw));
            page = get(&mut bob, &Pull::node(v.node).max_items(N).max(N).before(&last)).await;
        }
        let back_ids: Vec<String> = back.iter().flat_map(|(ids, _)| ids.clone()).collect();
        assert_eq!(back_ids, newest, "{}: back in time, every item once, newest first", v.node);
        assert!(back.iter().all(|(ids, _)| ids.len() <= N), "{}: pages of at most {N}", v.node);

        // Forward again from the oldest page: <after> each page's <first>.
        let (oldest, mut first) = back.pop().expect("a view with items");
        let mut forward: Vec<Vec<String>> = vec![oldest];
        loop {
            let page = get(&mut bob, &Pull::node(v.node).max_items(N).max(N).after(&first)).await;
            if page.items.is_empty() {
                break;
            }
            assert!(forward.len() <= newest.len() / N, "{}: more pages than items allow: {}", v.node, page.raw);
            first = page.first.clone().unwrap_or_else(|| panic!("a <first>: {}", page.raw));
            forward.push(page.ids());
        }
        forward.reverse();
        assert_eq!(forward.concat(), newest, "{}: forward again, every item once", v.node);
    }
    bob.close().await;
}

/// `<item id/>` lookups; filtered views hold exactly the matching items.
async fn check_lookups_and_filters(alice: &mut testkit::Connection, s: &Seed) {
    // <item id/> lookups: known ids, unknown ones left out; tombstones as tombstones.
    let reply = alice.iq(Pull::node(FEED).ids(&["a010", "nope", "a015", "z03"]).iq()).await;
    let page = parse_page(&reply);
    assert_eq!(page.node, FEED);
    let got: HashSet<String> = page.ids().into_iter().collect();
    assert_eq!(got, ["a010", "a015", "z03"].map(String::from).into_iter().collect(), "{}", page.raw);
    for item in &page.items {
        match item.id.as_str() {
            "a010" => assert_eq!(item.title().as_deref(), Some("a010 v2"), "{}", page.raw),
            "a015" => assert!(item.tombstone().is_some(), "{}", page.raw),
            _ => assert_eq!(item.title().as_deref(), Some("z03 v1"), "{}", page.raw),
        }
    }
    // None found: an empty <items node/> result, not an error.
    let reply = alice.iq(Pull::node("pull?order=modified").ids(&["nope", "neither"]).iq()).await;
    let page = parse_page(&reply);
    assert_eq!(page.node, "pull?order=modified");
    assert!(page.items.is_empty(), "{}", page.raw);

    // A filtered view holds exactly the matching items, tombstones of matching items included.
    let ann = s.expected(s.view("pull?author=ann&order=created"));
    assert!(ann.iter().any(|id| s.meta[id].retracted), "the seed retracts some of ann's items");
    let page = get(alice, &Pull::node("pull?author=ann&order=created").max(MAX_PAGE)).await;
    assert_eq!(page.ids(), ann);
    for item in &page.items {
        match item.entry() {
            Some(e) => {
                let author = e.get_child("author", ATOM).and_then(|a| a.get_child("name", ATOM)).map(|n| n.text());
                assert_eq!(author.as_deref(), Some("ann"), "{}", item.id);
            }
            None => assert!(item.tombstone().is_some() && s.meta[&item.id].retracted, "{}", item.id),
        }
    }
    // Parameter order does not matter: the same view.
    for node in ["pull?order=created&author=ann", "pull?author=ann&order=created"] {
        let page = get(alice, &Pull::node(node).max(MAX_PAGE)).await;
        assert_eq!(page.ids(), ann, "{node}");
    }
    // Percent-encoded values: `+` and `%20` are both a space.
    for node in [ZOE_NODE, "pull?author=Zo%C3%AB+%26+Co", "pull?order=-created&author=Zo%C3%AB%20%26%20Co"] {
        let page = get(alice, &Pull::node(node).max(MAX_PAGE)).await;
        assert_eq!(page.ids(), s.expected(s.view(ZOE_NODE)), "{node}");
        assert_eq!(page.count, Some(20));
    }
    // A value nothing matches: an empty view, not an error.
    let page = get(alice, &Pull::node("pull?category=nothing-here").max(5)).await;
    assert!(page.items.is_empty());
    assert_eq!(page.count, Some(0), "{}", page.raw);
}

#[tokio::test]
async fn page_sizes_lookups_and_filters() {
    let s = seed();
    let mut alice = login("alice").await;
    check_page_sizes(&mut alice, s).await;
    check_lookups_and_filters(&mut alice, s).await;
    alice.close().await;
}

/// MAM on views (XEP-0313 to the service, with a `node`): every view paged to its end
/// agrees with its RSM pages item for item (ids, payloads, `<first>`/`<last>` as result ids,
/// `<count>`, `<first index>`), every result comes from the service before the iq result
/// and echoes the `queryid`; `<fin complete>` only on the last page.
#[tokio::test]
async fn mam_pages_every_view_as_its_rsm_pages_do() {
    let s = seed();
    let mut carol = login("alice").await;
    for v in &VIEWS {
        let mam = mam_pages(&mut carol, COMPONENT_DOMAIN, MamQuery::node(v.node).max(25)).await;
        let rsm = pages(&mut carol, Pull::node(v.node).max(25)).await;
        let mam: Vec<&MamAnswer> = mam.iter().filter(|p| !p.results.is_empty()).collect();
        assert_eq!(mam.len(), rsm.len(), "{}: as many pages", v.node);
        let ids: Vec<&str> = mam.iter().flat_map(|p| p.ids()).collect();
        assert_eq!(ids, s.expected(v), "{}: every item once, in the view's order", v.node);
        for (k, (m, r)) in mam.iter().zip(&rsm).enumerate() {
            let raw = &m.raw;
            assert_eq!(m.ids(), r.ids(), "{} page {k}: the same items\n{raw}", v.node);
            assert_eq!((&m.first, &m.last), (&r.first, &r.last), "{} page {k}: the same cursors\n{raw}", v.node);
            assert_eq!((m.count, m.first_index), (r.count, r.first_index), "{} page {k}\n{raw}", v.node);
            assert_eq!(m.results.first().map(|x| &x.id), r.first.as_ref(), "result ids are the cursors\n{raw}");
            assert_eq!(m.results.last().map(|x| &x.id), r.last.as_ref(), "result ids are the cursors\n{raw}");
            assert_eq!(m.complete, k + 1 == rsm.len(), "{} page {k}: complete on the last page only\n{raw}", v.node);
            for (x, item) in m.results.iter().zip(&r.items) {
                assert_eq!(x.from, COMPONENT_DOMAIN, "{raw}");
                assert_eq!((x.queryid.as_deref(), x.node.as_str()), (Some("q"), v.node), "{raw}");
                assert!(x.stamp.as_deref().and_then(parse_rfc3339).is_some(), "a delay stamp: {raw}");
                assert_eq!(x.item.payload, item.payload, "the same payload\n{raw}");
            }
        }
    }
    carol.close().await;
}

/// XEP-0413 picks the time that orders a view (both versions of the namespace, in MAM and
/// in an items request); `start` and `end` bound a view's time, inclusive, and the count
/// and indexes are the window's; what cannot be honoured is refused by name, and a node a
/// pull refuses is refused the same way.
#[tokio::test]
async fn mam_orders_by_creation_or_modification_bounds_by_time_and_refuses_by_name() {
    let s = seed();
    let mut dave = login("bob").await;
    let expected = |node: &str| s.expected(s.view(node));
    // Order-by: the view's direction stays, its time changes.
    for (node, version, by, like) in [
        ("pull?order=created", 1, "modification", "pull?order=modified"),
        ("pull?order=-modified", 0, "creation", "pull?order=-created"),
        ("pull", 1, "modification", "pull?order=-modified"),
    ] {
        let q = MamQuery::node(node).max(200).order(version, by);
        let first = mam(&mut dave, COMPONENT_DOMAIN, &q).await.unwrap_or_else(|e| panic!("{}", testkit::to_xml(&e)));
        let rest = mam(&mut dave, COMPONENT_DOMAIN, &q.clone().after(first.last.as_deref().unwrap())).await.unwrap();
        let ids: Vec<&str> = first.ids().into_iter().chain(rest.ids()).collect();
        assert_eq!(ids, expected(like), "{node} ordered by {by} (order-by:{version}) is {like}");
    }
    let reply = dave
        .iq(testkit::xml(&format!(
            r#"<iq type="get" to="{COMPONENT_DOMAIN}"><pubsub xmlns="http://jabber.org/protocol/pubsub"><items node="pull?order=created"/><order xmlns="urn:xmpp:order-by:1" by="modification"/><set xmlns="{RSM}"><max>7</max></set></pubsub></iq>"#
        )))
        .await;
    assert_eq!(parse_page(&reply).ids(), expected("pull?order=modified")[..7], "order-by in an items request");

    // A window of the modified view's time, both ends inclusive.
    let node = "pull?order=modified";
    let cursors = item_cursors(&mut dave, node, 320).await;
    let (lo, hi) = (cursors[57].1.t, cursors[150].1.t);
    let inside: Vec<String> =
        cursors.iter().filter(|(_, c)| lo <= c.t && c.t <= hi).map(|(id, _)| id.clone()).collect();
    let window = |node: &str| MamQuery::node(node).max(10).field("start", &rfc3339(lo)).field("end", &rfc3339(hi));
    let got = mam_pages(&mut dave, COMPONENT_DOMAIN, window(node)).await;
    let ids: Vec<&str> = got.iter().flat_map(|p| p.ids()).collect();
    assert_eq!(ids, inside, "the window's items, in order");
    assert_eq!(got[0].count, Some(inside.len() as u64), "the count is the window's: {}", got[0].raw);
    assert_eq!(got[1].first_index, Some(10), "indexes count from the window's start: {}", got[1].raw);
    let got = mam_pages(&mut dave, COMPONENT_DOMAIN, window("pull?order=-modified")).await;
    let ids: Vec<&str> = got.iter().flat_map(|p| p.ids()).collect();
    let newest_first: Vec<&str> = inside.iter().rev().map(String::as_str).collect();
    assert_eq!(ids, newest_first, "the same window of the newest-first view");

    // Refused by name.
    for (q, named) in [
        (MamQuery::node(node).field("with", "ann@localhost"), "'with'"),
        (MamQuery::node(node).field("start", "yesterday"), "yesterday"),
        (MamQuery::node(node).order(1, "title"), "'title'"),
    ] {
        let e = mam(&mut dave, COMPONENT_DOMAIN, &q).await.expect_err("refused");
        let raw = testkit::to_xml(&e);
        assert_eq!(testkit::error_condition(&e).as_deref(), Some("bad-request"), "{raw}");
        assert!(raw.contains(named), "the error names {named}: {raw}");
    }
    // The fields a query may use (XEP-0313 §4.1.5): start and end.
    let reply = dave
        .iq(testkit::xml(&format!(
            r#"<iq type="get" to="{COMPONENT_DOMAIN}"><query xmlns="urn:xmpp:mam:2" node="{node}"/></iq>"#
        )))
        .await;
    let raw = testkit::to_xml(&reply);
    assert_eq!(testkit::stanza_type(&reply), "result", "{raw}");
    for var in ["FORM_TYPE", "start", "end"] {
        assert!(raw.contains(&format!("var='{var}'")), "the form offers {var}: {raw}");
    }
    assert!(!raw.contains("var='with'"), "and nothing else: {raw}");
    // As a pull refuses them: no such feed, no such view parameter.
    for node in ["nope", "pull?colour=red"] {
        let e = mam(&mut dave, COMPONENT_DOMAIN, &MamQuery::node(node)).await.expect_err("refused");
        let pulled = dave.iq(Pull::node(node).iq()).await;
        let (e, pulled) = (testkit::to_xml(&e), testkit::to_xml(&pulled));
        let error = |raw: &str| raw[raw.find("<error").expect("an error")..].to_string();
        assert_eq!(error(&e), error(&pulled), "the pull's error");
    }
    dave.close().await;
}
