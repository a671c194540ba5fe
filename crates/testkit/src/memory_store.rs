//! A store kept in maps, written for obviousness rather than speed: every ordered read sorts
//! what it scans. It is the model the conformance suite holds every store to, and the store
//! of the core's own tests, which then need no database. Nothing survives the process.
//!
//! A write runs on a copy of the state that replaces it only if the closure succeeds, so a
//! failed write leaves no trace (as a savepoint does); writes are serialised by one lock,
//! and the change sink is called under it, so changes arrive in commit order.

use feed::outbox::{HubSubscription, OutboxEntry, OutboxStats};
use feed::ports::{
    ChangeSink, FeedRow, Range, ReadTx, Scope, SourceState, Store, StoreError, StoreResult, Subscription, WriteTx,
};
use feed::{Change, FeedError, Item, Key};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

/// The in-memory [`Store`]. Clones share the same state.
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    state: State,
    sink: Option<ChangeSink>,
}

#[derive(Clone, Default)]
struct State {
    /// Feeds by name.
    feeds: BTreeMap<String, FeedRow>,
    /// Items by feed id, then by item id.
    items: HashMap<i64, HashMap<String, Item>>,
    /// Subscriptions by (feed id, view, JID).
    subs: BTreeMap<(i64, String, String), Subscription>,
    /// WebSub subscriptions by id.
    hub_subs: BTreeMap<i64, HubSubscription>,
    /// Outbox rows by sequence number.
    outbox: BTreeMap<i64, OutboxEntry>,
    /// The last sequence number and subscription id handed out (never reused).
    last_seq: i64,
    last_hub_id: i64,
    /// Sources' states by feed id.
    sources: HashMap<i64, SourceState>,
}

/// One transaction: the state as it was (reads) or a copy being changed (writes).
struct Tx<'a> {
    state: Cow<'a, State>,
    changes: Vec<Change>,
}

impl MemoryStore {
    /// An empty store; committed changes go to `sink`, in commit order.
    pub fn new(sink: Option<ChangeSink>) -> MemoryStore {
        MemoryStore { inner: Arc::new(Mutex::new(Inner { state: State::default(), sink })) }
    }
}

impl Store for MemoryStore {
    fn read<T, F>(&self, f: F) -> impl Future<Output = Result<T, FeedError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&dyn ReadTx) -> Result<T, FeedError> + Send + 'static,
    {
        let inner = self.inner.clone();
        async move {
            let guard = inner.lock().unwrap_or_else(PoisonError::into_inner);
            f(&Tx { state: Cow::Borrowed(&guard.state), changes: Vec::new() })
        }
    }

    fn write<T, F>(&self, f: F) -> impl Future<Output = Result<T, FeedError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn WriteTx) -> Result<T, FeedError> + Send + 'static,
    {
        let inner = self.inner.clone();
        async move {
            let mut guard = inner.lock().unwrap_or_else(PoisonError::into_inner);
            let mut tx = Tx { state: Cow::Owned(guard.state.clone()), changes: Vec::new() };
            let out = f(&mut tx)?;
            let Tx { state, changes } = tx;
            guard.state = state.into_owned();
            if let Some(sink) = guard.sink.as_mut()
                && !changes.is_empty()
            {
                sink(changes);
            }
            Ok(out)
        }
    }
}

impl Tx<'_> {
    /// The items of a scope in ascending key order.
    fn scope(&self, scope: Scope<'_>) -> Vec<(Key, &Item)> {
        let mut out: Vec<(Key, &Item)> = self
            .state
            .items
            .get(&scope.feed)
            .into_iter()
            .flat_map(|items| items.values())
            .filter(|i| scope.filter.matches(i.author.as_deref(), &i.categories))
            .map(|i| (i.key(scope.by), i))
            .collect();
        out.sort_by_key(|(k, _)| *k);
        out
    }

    fn state(&mut self) -> &mut State {
        self.state.to_mut()
    }
}

impl ReadTx for Tx<'_> {
    fn feed(&self, name: &str) -> StoreResult<Option<FeedRow>> {
        Ok(self.state.feeds.get(name).cloned())
    }

    fn feeds(&self, after: Option<&str>, limit: usize) -> StoreResult<Vec<FeedRow>> {
        let from = after.map_or(std::ops::Bound::Unbounded, |a| std::ops::Bound::Excluded(a.to_string()));
        Ok(self.state.feeds.range((from, std::ops::Bound::Unbounded)).take(limit).map(|(_, f)| f.clone()).collect())
    }

    fn item(&self, feed: i64, id: &str) -> StoreResult<Option<Item>> {
        Ok(self.state.items.get(&feed).and_then(|items| items.get(id)).cloned())
    }

    fn scan(&self, scope: Scope<'_>, range: Range) -> StoreResult<Vec<Item>> {
        let Range { after, before, descending, limit } = range;
        let inside = |k: &Key| after.is_none_or(|a| *k > a) && before.is_none_or(|b| *k < b);
        let mut items: Vec<Item> =
            self.scope(scope).into_iter().filter(|(k, _)| inside(k)).map(|(_, i)| i.clone()).collect();
        if descending {
            items.reverse();
        }
        items.truncate(limit);
        Ok(items)
    }

    fn count(&self, scope: Scope<'_>) -> StoreResult<u64> {
        Ok(self.scope(scope).len() as u64)
    }

    fn rank(&self, scope: Scope<'_>, key: Key) -> StoreResult<u64> {
        Ok(self.scope(scope).iter().filter(|(k, _)| *k < key).count() as u64)
    }

    fn nth(&self, scope: Scope<'_>, index: u64) -> StoreResult<Option<Key>> {
        let Ok(index) = usize::try_from(index) else { return Ok(None) };
        Ok(self.scope(scope).get(index).map(|(k, _)| *k))
    }

    fn ties(&self, scope: Scope<'_>, t: i64, upto_seq: i64, limit: usize) -> StoreResult<Vec<String>> {
        Ok(self
            .scope(scope)
            .into_iter()
            .filter(|(k, _)| k.t == t && k.seq <= upto_seq)
            .take(limit)
            .map(|(_, i)| i.id.clone())
            .collect())
    }

    fn subscribed_views(&self, feed: i64) -> StoreResult<Vec<String>> {
        let mut views: Vec<String> =
            self.state.subs.keys().filter(|(f, _, _)| *f == feed).map(|(_, v, _)| v.clone()).collect();
        views.dedup();
        Ok(views)
    }

    fn subscribers(&self, feed: i64, view: &str) -> StoreResult<Vec<Subscription>> {
        Ok(self.state.subs.iter().filter(|((f, v, _), _)| *f == feed && v == view).map(|(_, s)| s.clone()).collect())
    }

    fn subscriptions_of(&self, bare: &str) -> StoreResult<Vec<Subscription>> {
        let names: HashMap<i64, &str> = self.state.feeds.values().map(|f| (f.id, f.name.as_str())).collect();
        let mut subs: Vec<(&str, &Subscription)> = self
            .state
            .subs
            .iter()
            .filter(|(_, s)| feed::policy::bare(&s.jid) == bare)
            .map(|((f, _, _), s)| (names.get(f).copied().unwrap_or(""), s))
            .collect();
        subs.sort_by(|(fa, a), (fb, b)| (fa, &a.view, &a.jid).cmp(&(fb, &b.view, &b.jid)));
        Ok(subs.into_iter().map(|(_, s)| s.clone()).collect())
    }

    fn subscription_count(&self, feed: i64) -> StoreResult<u64> {
        Ok(self.state.subs.keys().filter(|(f, _, _)| *f == feed).count() as u64)
    }

    fn hub_views(&self, feed: i64) -> StoreResult<Vec<String>> {
        let mut views: Vec<String> =
            self.state.hub_subs.values().filter(|s| s.feed == feed).map(|s| s.view.clone()).collect();
        views.sort();
        views.dedup();
        Ok(views)
    }

    fn hub_subscriptions(&self, after: i64, limit: usize) -> StoreResult<Vec<HubSubscription>> {
        Ok(self.state.hub_subs.range(after.saturating_add(1)..).take(limit).map(|(_, s)| s.clone()).collect())
    }

    fn hub_subscribers(&self, feed: i64) -> StoreResult<Vec<HubSubscription>> {
        let mut subs: Vec<HubSubscription> = self.state.hub_subs.values().filter(|s| s.feed == feed).cloned().collect();
        subs.sort_by(|a, b| (&a.view, &a.callback).cmp(&(&b.view, &b.callback)));
        Ok(subs)
    }

    fn outbox(&self, feed: i64, view: &str, after: i64, limit: usize) -> StoreResult<Vec<OutboxEntry>> {
        Ok(self
            .state
            .outbox
            .range(after.saturating_add(1)..)
            .filter(|(_, e)| e.feed == feed && e.view == view)
            .take(limit)
            .map(|(_, e)| e.clone())
            .collect())
    }

    fn outbox_stats(&self) -> StoreResult<OutboxStats> {
        let o = &self.state.outbox;
        Ok(OutboxStats { rows: o.len() as u64, oldest: o.values().map(|e| e.at).min() })
    }

    fn source_state(&self, feed: i64) -> StoreResult<Option<SourceState>> {
        Ok(self.state.sources.get(&feed).cloned())
    }
}

impl WriteTx for Tx<'_> {
    /// A plain read: writes are serialised by the store's lock.
    fn feed_for_update(&mut self, name: &str) -> StoreResult<Option<FeedRow>> {
        self.feed(name)
    }

    fn create_feed(&mut self, name: &str) -> StoreResult<FeedRow> {
        let state = self.state();
        if state.feeds.contains_key(name) {
            return Err(StoreError::Backend(format!("feed {name:?} exists")));
        }
        let id = state.feeds.values().map(|f| f.id).max().unwrap_or(0) + 1;
        let row = FeedRow { id, name: name.to_string(), items: 0, last_t: 0, last_mseq: 0 };
        state.feeds.insert(name.to_string(), row.clone());
        Ok(row)
    }

    fn save_feed(&mut self, feed: &FeedRow) -> StoreResult<()> {
        match self.state().feeds.get_mut(&feed.name) {
            Some(row) if row.id == feed.id => {
                *row = feed.clone();
                Ok(())
            }
            _ => Err(StoreError::Backend(format!("no feed with id {}", feed.id))),
        }
    }

    fn insert_item(&mut self, feed: i64, item: &Item) -> StoreResult<()> {
        let items = self.state().items.entry(feed).or_default();
        if items.contains_key(&item.id) {
            return Err(StoreError::Backend(format!("item {:?} exists", item.id)));
        }
        items.insert(item.id.clone(), item.clone());
        Ok(())
    }

    fn update_item(&mut self, feed: i64, old: &Item, new: &Item) -> StoreResult<()> {
        if old.id != new.id || old.created != new.created {
            return Err(StoreError::Backend(format!("update of {:?} must keep its id and created key", old.id)));
        }
        match self.state().items.get_mut(&feed).and_then(|items| items.get_mut(&old.id)) {
            Some(stored) => {
                *stored = new.clone();
                Ok(())
            }
            None => Err(StoreError::Backend(format!("no item {:?} to update", old.id))),
        }
    }

    fn put_subscription(&mut self, feed: i64, sub: &Subscription) -> StoreResult<()> {
        self.state().subs.insert((feed, sub.view.clone(), sub.jid.clone()), sub.clone());
        Ok(())
    }

    fn delete_subscription(&mut self, feed: i64, view: &str, jid: &str) -> StoreResult<bool> {
        Ok(self.state().subs.remove(&(feed, view.to_string(), jid.to_string())).is_some())
    }

    fn delete_subscriptions_of(&mut self, jid: &str) -> StoreResult<u64> {
        let subs = &mut self.state().subs;
        let before = subs.len();
        subs.retain(|(_, _, j), _| j != jid);
        Ok((before - subs.len()) as u64)
    }

    fn put_hub_subscription(&mut self, sub: &HubSubscription) -> StoreResult<HubSubscription> {
        let state = self.state();
        let same = |s: &HubSubscription| s.feed == sub.feed && s.view == sub.view && s.callback == sub.callback;
        let stored = match state.hub_subs.values().find(|s| same(s)) {
            Some(old) => HubSubscription { id: old.id, delivered: old.delivered, ..sub.clone() },
            None => {
                state.last_hub_id += 1;
                let delivered = state
                    .outbox
                    .values()
                    .filter(|e| e.feed == sub.feed && e.view == sub.view)
                    .map(|e| e.seq)
                    .max()
                    .unwrap_or(0);
                HubSubscription { id: state.last_hub_id, delivered, ..sub.clone() }
            }
        };
        state.hub_subs.insert(stored.id, stored.clone());
        Ok(stored)
    }

    fn delete_hub_subscription(&mut self, feed: i64, view: &str, callback: &str) -> StoreResult<bool> {
        let subs = &mut self.state().hub_subs;
        let before = subs.len();
        subs.retain(|_, s| !(s.feed == feed && s.view == view && s.callback == callback));
        Ok(subs.len() < before)
    }

    fn expire_hub_subscriptions(&mut self, now: i64) -> StoreResult<Vec<i64>> {
        let subs = &mut self.state().hub_subs;
        let gone: Vec<i64> = subs.values().filter(|s| s.expires <= now).map(|s| s.id).collect();
        for id in &gone {
            subs.remove(id);
        }
        Ok(gone)
    }

    fn put_source_state(&mut self, feed: i64, state: &SourceState) -> StoreResult<()> {
        self.state().sources.insert(feed, state.clone());
        Ok(())
    }

    fn hub_delivered(&mut self, id: i64, upto: i64) -> StoreResult<bool> {
        match self.state().hub_subs.get_mut(&id) {
            Some(s) => {
                s.delivered = s.delivered.max(upto);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn append_outbox(&mut self, entry: &OutboxEntry) -> StoreResult<i64> {
        let state = self.state();
        state.last_seq += 1;
        let seq = state.last_seq;
        state.outbox.insert(seq, OutboxEntry { seq, ..entry.clone() });
        Ok(seq)
    }

    fn prune_outbox(&mut self, keep: u64) -> StoreResult<u64> {
        let state = self.state();
        let mut needed: HashMap<(i64, &str), i64> = HashMap::new();
        for s in state.hub_subs.values() {
            let d = needed.entry((s.feed, s.view.as_str())).or_insert(i64::MAX);
            *d = (*d).min(s.delivered);
        }
        let mut kept: HashMap<(i64, &str), u64> = HashMap::new();
        let mut gone = Vec::new();
        // Newest first, so "more than `keep`" drops the oldest.
        for (seq, e) in state.outbox.iter().rev() {
            let n = kept.entry((e.feed, e.view.as_str())).or_insert(0);
            let passed = needed.get(&(e.feed, e.view.as_str())).is_none_or(|d| *seq <= *d);
            if passed || *n >= keep {
                gone.push(*seq);
            } else {
                *n += 1;
            }
        }
        for seq in &gone {
            state.outbox.remove(seq);
        }
        Ok(gone.len() as u64)
    }

    fn emit(&mut self, change: Change) {
        self.changes.push(change);
    }
}
