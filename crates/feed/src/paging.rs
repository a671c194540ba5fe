//! Cutting a page out of a view, with XEP-0059 semantics over T+O+C cursors.
//!
//! Everything here works on keys in ascending order through [`ReadTx`]; a descending view
//! swaps which bound `after` and `before` set. Positions become *exclusive* key bounds:
//! a cursor or id is the item's own key, a time is the first or last key at that time, which
//! makes `time:` specs inclusive as the protocol wants.

use super::cursor::Cursor;
use super::error::FeedError;
use super::item::{Item, Key};
use super::node::View;
use super::ports::{FeedRow, Range, ReadTx, Scope};
use super::position::Position;

/// How many same-time items a cursor checksum may cover. A cursor claiming more is treated
/// like one whose checksum failed (a time fallback), which is always safe.
const MAX_TIES: usize = 1_000_000;

/// Where a page starts or ends, as the client asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Anchor {
    /// Start the page at this view index.
    Index(u64),
    /// Items after this position (and before `before`, if given).
    After(Position),
}

/// A request for one page, positions already parsed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageRequest {
    /// Items wanted; 0 asks for the count only.
    pub max: usize,
    pub start: Option<Anchor>,
    /// `Some(None)`: the last page (an empty `<before/>`); `Some(Some(p))`: items before p.
    pub before: Option<Option<Position>>,
    /// The part of the view the request is about; the count and indexes are the window's.
    pub window: Window,
}

/// A span of a view's time, both ends inclusive (MAM's `start` and `end`), Unix ms: the
/// view as far as a request is concerned, its count and indexes included.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub from: Option<i64>,
    pub to: Option<i64>,
}

impl Window {
    /// The window's exclusive key bounds (below its first key, above its last), ascending.
    fn keys(self) -> (Option<Key>, Option<Key>) {
        (self.from.map(Key::start_of), self.to.map(Key::end_of))
    }
}

/// A page of a view, in view order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    pub items: Vec<Item>,
    /// The view index of the first item.
    pub first_index: Option<u64>,
    pub first: Option<Cursor>,
    pub last: Option<Cursor>,
    /// The cursor of every item, in the order of `items` (the HTTP face writes one per item).
    pub cursors: Vec<Cursor>,
    /// Items in the whole view.
    pub count: u64,
}

/// The scope a view reads: its feed, order and filter, without direction.
pub fn scope<'a>(feed: &FeedRow, view: &'a View) -> Scope<'a> {
    Scope { feed: feed.id, by: view.order.by, filter: &view.filter }
}

/// The cursor of an item in a scope.
pub fn cursor_of(tx: &dyn ReadTx, scope: Scope<'_>, key: Key) -> Result<Cursor, FeedError> {
    let ids = tx.ties(scope, key.t, key.seq, MAX_TIES)?;
    Ok(Cursor::of(key.t, ids.iter().map(String::as_str)))
}

/// Which side of a position a bound is for, in view order.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    After,
    Before,
}

/// An exclusive key bound, with the cursor's tie ids when a cursor gave it.
struct Bound {
    key: Key,
    /// The ids at `key.t` through the item at `key`, in tie order: what a cursor of a
    /// neighbouring item is made of, so the page need not read them again.
    ties: Option<Vec<String>>,
}

/// Turns a position into an exclusive key bound for `side` of a view.
fn bound(tx: &dyn ReadTx, feed: &FeedRow, view: &View, pos: &Position, side: Side) -> Result<Bound, FeedError> {
    let scope = scope(feed, view);
    let time = |t: i64| {
        // Inclusive in view order: "after T" in an ascending view starts at the first key of
        // T; in a descending view it ends at the last key of T. "before" mirrors that.
        let key = if (side == Side::After) != view.order.descending { Key::start_of(t) } else { Key::end_of(t) };
        Bound { key, ties: None }
    };
    match pos {
        Position::Time(t) => Ok(time(*t)),
        Position::Id(id) => match tx.item(feed.id, id)? {
            Some(item) => Ok(Bound { key: item.key(view.order.by), ties: None }),
            None => Err(FeedError::ItemNotFound(id.clone())),
        },
        Position::Cursor(c) => {
            let want = usize::try_from(c.o).unwrap_or(usize::MAX).saturating_add(1);
            if want > MAX_TIES {
                return Ok(time(c.t));
            }
            let ids = tx.ties(scope, c.t, i64::MAX, want)?;
            if !c.verify(ids.iter().map(String::as_str)) {
                return Ok(time(c.t));
            }
            match tx.item(feed.id, &ids[want - 1])? {
                Some(item) => Ok(Bound { key: item.key(view.order.by), ties: Some(ids) }),
                None => Ok(time(c.t)),
            }
        }
    }
}

/// Cuts the page `req` asks for out of `view`.
pub fn page(tx: &dyn ReadTx, feed: &FeedRow, view: &View, req: &PageRequest) -> Result<Page, FeedError> {
    let scope = scope(feed, view);
    let desc = view.order.descending;
    // The window's first item's ascending rank (`base`), and the count within it.
    let (w_lo, w_hi) = req.window.keys();
    let base = match w_lo {
        Some(k) => tx.rank(scope, k)?,
        None => 0,
    };
    let count = match w_hi {
        Some(k) => tx.rank(scope, k)?.saturating_sub(base),
        None => tx.count(scope)?.saturating_sub(base),
    };
    let mut out = Page { count, ..Page::default() };
    // Bounds in view order, then mapped onto ascending keys.
    let mut after: Option<Bound> = None;
    let mut before: Option<Bound> = None;
    match &req.start {
        Some(Anchor::Index(i)) => {
            if *i >= count {
                return Ok(out);
            }
            let asc_index = base + if desc { count - 1 - i } else { *i };
            let Some(k) = tx.nth(scope, asc_index)? else { return Ok(out) };
            // Just outside the item, on the side the page starts from.
            let key = if desc {
                Key { t: k.t, seq: k.seq.saturating_add(1) }
            } else {
                Key { t: k.t, seq: k.seq.saturating_sub(1) }
            };
            after = Some(Bound { key, ties: None });
        }
        Some(Anchor::After(p)) => after = Some(bound(tx, feed, view, p, Side::After)?),
        None => {}
    }
    if let Some(Some(p)) = &req.before {
        before = Some(bound(tx, feed, view, p, Side::Before)?);
    }
    // Only `before` given: the page ends at it (or at the end) and is read backwards.
    let backwards = req.before.is_some() && req.start.is_none();
    if req.max == 0 {
        return Ok(out);
    }
    let (mut lo, mut hi) = if desc { (before, after) } else { (after, before) };
    // The window narrows the bounds where it is tighter.
    if let Some(k) = w_lo
        && lo.as_ref().is_none_or(|b| b.key < k)
    {
        lo = Some(Bound { key: k, ties: None });
    }
    if let Some(k) = w_hi
        && hi.as_ref().is_none_or(|b| b.key > k)
    {
        hi = Some(Bound { key: k, ties: None });
    }
    // Walking forward in a descending view is walking down the keys, and so on.
    let scan_descending = desc != backwards;
    let (lo_key, hi_key) = (lo.as_ref().map(|b| b.key), hi.as_ref().map(|b| b.key));
    if let (Some(l), Some(h)) = (lo_key, hi_key)
        && l >= h
    {
        return Ok(out);
    }
    let mut items =
        tx.scan(scope, Range { after: lo_key, before: hi_key, descending: scan_descending, limit: req.max })?;
    if backwards {
        items.reverse();
    }
    // The scan went from this bound, so its item is the page's neighbour in the scope.
    let from = if scan_descending { hi } else { lo };
    let neighbour = from.and_then(|b| Some((b.key, b.ties?)));
    finish(tx, scope, view, items, neighbour, base, &mut out)?;
    Ok(out)
}

/// The items with these ids that belong to the view, in view order.
pub fn by_ids(tx: &dyn ReadTx, feed: &FeedRow, view: &View, ids: &[String]) -> Result<Page, FeedError> {
    let scope = scope(feed, view);
    let mut items = Vec::new();
    for id in ids {
        if let Some(item) = tx.item(feed.id, id)?
            && view.filter.matches(item.author.as_deref(), &item.categories)
            && !items.iter().any(|i: &Item| i.id == item.id)
        {
            items.push(item);
        }
    }
    items.sort_by_key(|i| i.key(view.order.by));
    if view.order.descending {
        items.reverse();
    }
    let mut out = Page { count: tx.count(scope)?, ..Page::default() };
    finish(tx, scope, view, items, None, 0, &mut out)?;
    Ok(out)
}

/// Fills in the first index and the first and last cursors of a page.
///
/// `base` is the ascending rank of the page's window's first item (0 for the whole view).
/// `neighbour` is the key and tie ids of the scope's item right next to the page (below its
/// lowest key or above its highest), when the page was read from a cursor: with it, the
/// cursors of the page cost no read at all. Without it, one read of tie ids at most.
fn finish(
    tx: &dyn ReadTx,
    scope: Scope<'_>,
    view: &View,
    items: Vec<Item>,
    neighbour: Option<(Key, Vec<String>)>,
    base: u64,
    out: &mut Page,
) -> Result<(), FeedError> {
    if let Some(first) = items.first() {
        let fk = first.key(view.order.by);
        let rank = tx.rank(scope, fk)?.saturating_sub(base);
        out.first_index = Some(if view.order.descending { out.count.saturating_sub(rank + 1) } else { rank });
        let mut asc: Vec<(Key, &str)> = items.iter().map(|i| (i.key(view.order.by), i.id.as_str())).collect();
        if view.order.descending {
            asc.reverse();
        }
        let lowest = lowest_ties(tx, scope, &asc, neighbour)?;
        let cursor = |j: usize| page_cursor(&asc, &lowest, j);
        let (first_at, last_at) = if view.order.descending { (asc.len() - 1, 0) } else { (0, asc.len() - 1) };
        out.first = Some(cursor(first_at));
        out.last = Some(cursor(last_at));
        out.cursors = (0..asc.len()).map(cursor).collect();
        if view.order.descending {
            out.cursors.reverse();
        }
    }
    out.items = items;
    Ok(())
}

/// The tie ids through the lowest item of a page (`asc`: the page's keys and ids,
/// ascending, contiguous in the scope).
fn lowest_ties(
    tx: &dyn ReadTx,
    scope: Scope<'_>,
    asc: &[(Key, &str)],
    neighbour: Option<(Key, Vec<String>)>,
) -> Result<Vec<String>, FeedError> {
    let (low, low_id) = asc[0];
    let n = asc.len();
    match neighbour {
        // Right below the page: the lowest item follows it in its tie group, or opens its own.
        Some((k, mut ids)) if k < low => {
            if k.t != low.t {
                ids.clear();
            }
            ids.push(low_id.to_string());
            Ok(ids)
        }
        // Right above the page, at the same time: the whole page is in its tie group, just
        // before it.
        Some((k, mut ids)) if k.t == low.t && ids.len() > n => {
            ids.truncate(ids.len() - n);
            Ok(ids)
        }
        _ => Ok(tx.ties(scope, low.t, low.seq, MAX_TIES)?),
    }
}

/// The cursor of the page's `j`-th lowest item: its tie group is the page's items before it
/// at its time, preceded by the lowest item's own tie group when that is the same time.
fn page_cursor(asc: &[(Key, &str)], lowest: &[String], j: usize) -> Cursor {
    let t = asc[j].0.t;
    let from = asc[..=j].iter().rposition(|(k, _)| k.t != t).map_or(0, |p| p + 1);
    let own = asc[from..=j].iter().map(|(_, id)| *id);
    if from == 0 {
        // `lowest` ends with the page's first item, which `own` starts with.
        Cursor::of(t, lowest.iter().map(String::as_str).chain(own.skip(1)))
    } else {
        Cursor::of(t, own)
    }
}
