//! Property tests of the paging invariants: the real core against a simple model, while
//! publishes, updates and retractions interleave and the clock steps back and forth (so ties
//! in time and non-monotonic wall clocks are exercised). The core runs on the in-memory
//! store: paging is the core's, and every store is held to the in-memory one by
//! `tests/store_conformance.rs`, so these need no database.

use feed::paging::Page;
use feed::service::{PullRequest, Service};
use feed::{Cursor, Entry, Filter, Order, OrderBy, View};
use proptest::prelude::*;
use smartfeeds::config::Config;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use testkit::memory_store::MemoryStore;

const ADMIN: &str = "admin@localhost";

#[derive(Clone, Debug)]
enum Op {
    Publish { author: u8, cats: u8 },
    Update { which: usize, author: u8, cats: u8 },
    Retract { which: usize },
    Clock { step: i64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, 0u8..4).prop_map(|(author, cats)| Op::Publish { author, cats }),
        2 => (any::<usize>(), 0u8..3, 0u8..4).prop_map(|(which, author, cats)| Op::Update { which, author, cats }),
        1 => any::<usize>().prop_map(|which| Op::Retract { which }),
        2 => (-3i64..4).prop_map(|step| Op::Clock { step }),
    ]
}

/// The model: what the spec says, in the plainest form.
#[derive(Clone, Debug)]
struct ModelItem {
    id: String,
    created: (i64, u64),
    modified: (i64, u64),
    author: Option<String>,
    cats: Vec<String>,
    deleted: bool,
}

#[derive(Default)]
struct Model {
    items: Vec<ModelItem>,
    last_t: i64,
    seq: u64,
}

impl Model {
    /// The next modification stamp; an item modified again in the same millisecond moves
    /// one millisecond on (`prev`: its current modified time).
    fn stamp(&mut self, now: i64, prev: Option<i64>) -> (i64, u64) {
        self.last_t = self.last_t.max(now);
        if prev == Some(self.last_t) {
            self.last_t += 1;
        }
        self.seq += 1;
        (self.last_t, self.seq)
    }

    /// The view's items in view order, with their ordering keys.
    fn view(&self, v: &View) -> Vec<(String, (i64, u64))> {
        let mut out: Vec<_> = self
            .items
            .iter()
            .filter(|i| v.filter.matches(i.author.as_deref(), &i.cats))
            .map(|i| (i.id.clone(), if v.order.by == OrderBy::Created { i.created } else { i.modified }))
            .collect();
        out.sort_by_key(|(_, k)| *k);
        if v.order.descending {
            out.reverse();
        }
        out
    }

    /// The cursor of an item of the view: its time, and the ids of the view's items at that
    /// time in ascending key order through it.
    fn cursor(&self, v: &View, id: &str) -> Cursor {
        let mut keyed = self.view(v);
        keyed.sort_by_key(|(_, k)| *k);
        let (_, (t, _)) = keyed.iter().find(|(i, _)| i == id).unwrap().clone();
        let ties: Vec<&str> = keyed.iter().filter(|(_, k)| k.0 == t).map(|(i, _)| i.as_str()).collect();
        let upto = ties.iter().position(|i| *i == id).unwrap();
        Cursor::of(t, ties[..=upto].iter().copied())
    }
}

fn author(n: u8) -> Option<String> {
    (n > 0).then(|| format!("a{n}"))
}

fn cats(bits: u8) -> Vec<String> {
    ["x", "y"].iter().enumerate().filter(|(i, _)| bits & (1 << i) != 0).map(|(_, c)| c.to_string()).collect()
}

fn views() -> Vec<View> {
    let mut out = Vec::new();
    for order in ["created", "-created", "modified", "-modified"] {
        for filter in [
            Filter::default(),
            Filter { author: Some("a1".into()), category: None },
            Filter { author: None, category: Some("x".into()) },
        ] {
            out.push(View { feed: "f".into(), order: Order::parse(order).unwrap(), filter });
        }
    }
    out
}

struct World {
    rt: tokio::runtime::Runtime,
    svc: Service<MemoryStore>,
    clock: Arc<AtomicI64>,
    model: Model,
}

impl World {
    fn new() -> World {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let config = Config::parse(&format!(
            "admins = [\"{ADMIN}\"]\nautocreate = true\n[component]\njid = \"feeds.localhost\"\nsecret = \"s\"\n[[feeds]]\nname = \"f\"\n"
        ))
        .unwrap();
        let clock = Arc::new(AtomicI64::new(1_700_000_000_000));
        let c = clock.clone();
        let store = MemoryStore::new(None);
        let svc = Service::new(store, Arc::new(config.policy()), Arc::new(move || c.load(Ordering::SeqCst)));
        rt.block_on(svc.init()).unwrap();
        World { rt, svc, clock, model: Model::default() }
    }

    fn apply(&mut self, op: &Op) {
        let now = self.clock.load(Ordering::SeqCst);
        let n = self.model.items.len();
        match *op {
            Op::Clock { step } => {
                self.clock.fetch_add(step, Ordering::SeqCst);
            }
            Op::Publish { author: a, cats: c } => {
                let id = format!("i{n}");
                self.publish(&id, a, c);
                let stamp = self.model.stamp(now, None);
                let created = (stamp.0, n as u64);
                self.model.items.push(ModelItem {
                    id,
                    created,
                    modified: stamp,
                    author: author(a),
                    cats: cats(c),
                    deleted: false,
                });
            }
            Op::Update { which, author: a, cats: c } if n > 0 => {
                let id = self.model.items[which % n].id.clone();
                self.publish(&id, a, c);
                let stamp = self.model.stamp(now, Some(self.model.items[which % n].modified.0));
                let item = &mut self.model.items[which % n];
                item.modified = stamp;
                item.deleted = false;
                item.author = author(a);
                item.cats = cats(c);
            }
            Op::Retract { which } if n > 0 => {
                let id = self.model.items[which % n].id.clone();
                self.rt.block_on(self.svc.retract(ADMIN, "f", id)).unwrap();
                if !self.model.items[which % n].deleted {
                    let stamp = self.model.stamp(now, Some(self.model.items[which % n].modified.0));
                    let item = &mut self.model.items[which % n];
                    item.modified = stamp;
                    item.deleted = true;
                }
            }
            _ => {}
        }
    }

    fn publish(&self, id: &str, a: u8, c: u8) {
        let entry = Entry {
            xml: format!("<entry xmlns='http://www.w3.org/2005/Atom'><id>{id}</id></entry>"),
            atom_id: Some(id.into()),
            author: author(a),
            categories: cats(c),
        };
        let done = self.rt.block_on(self.svc.publish(ADMIN, "f", Some(id.into()), entry)).unwrap();
        // What a publish returns is the item's cursor in the modification order, as a pull
        // of it gives it, whether it is alone at its millisecond or shares it.
        let req = PullRequest { node: "f?order=modified".into(), ids: vec![id.into()], ..Default::default() };
        let page = self.rt.block_on(self.svc.pull(ADMIN, req)).unwrap();
        assert_eq!(page.cursors.first(), Some(&done.cursor), "the cursor publishing {id} returned");
    }

    fn pull(&self, node: &str, max: u64, after: Option<String>, before: Option<String>, index: Option<u64>) -> Page {
        let req = PullRequest { node: node.into(), max: Some(max), after, before, index, ..Default::default() };
        self.rt.block_on(self.svc.pull(ADMIN, req)).unwrap()
    }
}

fn ids(p: &Page) -> Vec<String> {
    p.items.iter().map(|i| i.id.clone()).collect()
}

/// Walks the whole view forward (or backward) in pages of `max` and checks each page's set.
fn walk(w: &World, v: &View, max: u64, forward: bool) -> Vec<String> {
    let expected = w.model.view(v);
    let node = v.canonical();
    let mut seen = Vec::new();
    let mut pos: Option<String> = None;
    for _ in 0..=expected.len() + 1 {
        let page = if forward {
            w.pull(&node, max, pos.clone().map(|c| format!("cursor:{c}")), None, None)
        } else {
            w.pull(&node, max, None, Some(pos.clone().map(|c| format!("cursor:{c}")).unwrap_or_default()), None)
        };
        assert_eq!(page.count, expected.len() as u64, "count of {node}");
        if page.items.is_empty() {
            assert!(page.first.is_none() && page.last.is_none() && page.first_index.is_none());
            break;
        }
        assert!(page.items.len() as u64 <= max);
        let first_index = page.first_index.unwrap() as usize;
        let page_ids = ids(&page);
        let want: Vec<String> =
            expected[first_index..first_index + page_ids.len()].iter().map(|(id, _)| id.clone()).collect();
        assert_eq!(page_ids, want, "page of {node} at index {first_index} is in view order");
        assert_eq!(page.first, Some(w.model.cursor(v, &page_ids[0])), "first cursor of a page of {node}");
        assert_eq!(
            page.last,
            Some(w.model.cursor(v, &page_ids[page_ids.len() - 1])),
            "last cursor of a page of {node}"
        );
        if forward {
            seen.extend(page_ids);
            pos = Some(page.last.unwrap().to_string());
        } else {
            seen.splice(0..0, page_ids);
            pos = Some(page.first.unwrap().to_string());
        }
    }
    seen
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Walking forward with `after` or backward with `before`, in any view and any page size,
    /// visits every item of the view exactly once, in order; counts and indexes match.
    #[test]
    fn walks_visit_every_item_once(ops in proptest::collection::vec(op(), 1..60), max in 1u64..7) {
        let mut w = World::new();
        for op in &ops {
            w.apply(op);
        }
        for v in views() {
            let want: Vec<String> = w.model.view(&v).into_iter().map(|(id, _)| id).collect();
            prop_assert_eq!(walk(&w, &v, max, true), want.clone(), "forward {}", v.canonical());
            prop_assert_eq!(walk(&w, &v, max, false), want.clone(), "backward {}", v.canonical());
            // time: specs are inclusive, in view order, both ways.
            let keyed = w.model.view(&v);
            for (_, (t, _)) in keyed.iter().step_by(3) {
                let spec = format!("time:{}", feed::position::rfc3339(*t));
                let later = |k: i64| if v.order.descending { k <= *t } else { k >= *t };
                let want_after: Vec<String> = keyed.iter().filter(|(_, k)| later(k.0)).map(|(id, _)| id.clone()).collect();
                let want_before: Vec<String> =
                    keyed.iter().filter(|(_, k)| k.0 == *t || !later(k.0)).map(|(id, _)| id.clone()).collect();
                prop_assert_eq!(ids(&w.pull(&v.canonical(), 1000, Some(spec.clone()), None, None)), want_after);
                prop_assert_eq!(ids(&w.pull(&v.canonical(), 1000, None, Some(spec), None)), want_before);
            }
            // max_items: the n items with the latest times, newest first.
            let n = max as usize;
            let mut latest = keyed.clone();
            latest.sort_by_key(|(_, k)| std::cmp::Reverse(*k));
            latest.truncate(n);
            let want_latest: Vec<String> = latest.iter().map(|(id, _)| id.clone()).collect();
            let req = PullRequest { node: v.canonical(), max_items: Some(max), ..Default::default() };
            prop_assert_eq!(ids(&w.rt.block_on(w.svc.pull(ADMIN, req)).unwrap()), want_latest);
            // index paging lands on the same items.
            for i in (0..want.len() + 1).step_by(max as usize) {
                let p = w.pull(&v.canonical(), max, None, None, Some(i as u64));
                let end = (i + max as usize).min(want.len());
                prop_assert_eq!(ids(&p), want[i.min(want.len())..end].to_vec());
            }
        }
    }

    /// A window of the view's time (MAM's `start` and `end`, inclusive) holds exactly the
    /// view's items in it, in view order: walked forward in pages with cursors, its count
    /// and indexes are the window's, and index paging lands on the same items.
    #[test]
    fn windows_hold_exactly_the_items_of_their_span(
        ops in proptest::collection::vec(op(), 1..50),
        max in 1u64..6,
        ends in (0i64..12, 0i64..12),
    ) {
        let mut w = World::new();
        for op in &ops {
            w.apply(op);
        }
        let base = w.model.items.iter().map(|i| i.created.0).min().unwrap_or(0);
        let (from, to) = (base + ends.0.min(ends.1), base + ends.0.max(ends.1));
        for v in views() {
            let want: Vec<String> =
                w.model.view(&v).into_iter().filter(|(_, k)| from <= k.0 && k.0 <= to).map(|(id, _)| id).collect();
            let node = v.canonical();
            let ask = |after: Option<String>, index: Option<u64>| PullRequest {
                node: node.clone(),
                max: Some(max),
                after,
                index,
                from: Some(from),
                to: Some(to),
                ..Default::default()
            };
            let mut got = Vec::new();
            let mut after = None;
            for _ in 0..=want.len() {
                let p = w.rt.block_on(w.svc.pull(ADMIN, ask(after.clone(), None))).unwrap();
                prop_assert_eq!(p.count, want.len() as u64, "the window's count in {}", node);
                if p.items.is_empty() {
                    break;
                }
                prop_assert_eq!(p.first_index, Some(got.len() as u64), "indexes count in the window of {}", node);
                got.extend(ids(&p));
                after = Some(format!("cursor:{}", p.last.unwrap()));
            }
            prop_assert_eq!(&got, &want, "the window of {}", node);
            for i in (0..want.len()).step_by(max as usize) {
                let p = w.rt.block_on(w.svc.pull(ADMIN, ask(None, Some(i as u64)))).unwrap();
                let end = (i + max as usize).min(want.len());
                prop_assert_eq!(ids(&p), want[i..end].to_vec(), "index {} of the window of {}", i, node);
            }
        }
    }

    /// A cursor handed out before later changes still resumes without skipping an item: every
    /// item now after the cursor's old position is in the resumed walk, in order, once.
    #[test]
    fn stale_cursors_never_skip(
        before in proptest::collection::vec(op(), 1..40),
        after in proptest::collection::vec(op(), 1..30),
        pick in any::<usize>(),
        max in 1u64..6,
    ) {
        let mut w = World::new();
        for op in &before {
            w.apply(op);
        }
        let mut held = Vec::new();
        for v in views() {
            let all = w.pull(&v.canonical(), 1000, None, None, None);
            if all.items.is_empty() {
                continue;
            }
            let k = pick % all.items.len();
            let p = w.pull(&v.canonical(), 1, None, None, Some(k as u64));
            let key = w.model.view(&v)[k].1;
            held.push((v, p.first.unwrap(), key));
        }
        for op in &after {
            w.apply(op);
        }
        for (v, cursor, old_key) in held {
            let expected = w.model.view(&v);
            let must: Vec<String> = expected
                .iter()
                .filter(|(_, k)| if v.order.descending { *k < old_key } else { *k > old_key })
                .map(|(id, _)| id.clone())
                .collect();
            let mut got = Vec::new();
            let mut pos = format!("cursor:{cursor}");
            // A walk that does not move on would never end: it may take one page per item.
            for _ in 0..=expected.len() {
                let p = w.pull(&v.canonical(), max, Some(pos), None, None);
                if p.items.is_empty() {
                    break;
                }
                got.extend(ids(&p));
                pos = format!("cursor:{}", p.last.unwrap());
            }
            let order: Vec<String> = expected.iter().map(|(id, _)| id.clone()).filter(|id| got.contains(id)).collect();
            prop_assert_eq!(&got, &order, "resumed walk of {} is in view order without repeats", v.canonical());
            for id in must {
                prop_assert!(got.contains(&id), "{} skipped {} after {}", v.canonical(), id, cursor);
            }
        }
    }
}
