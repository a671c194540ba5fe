//! The subscriptions in force and their delivery tasks, by id and by view, and the change
//! sink that wakes them. Made before the store opens (the sink must be handed to it), so it
//! knows nothing of the store: [`super::Hub`] fills it and runs the tasks.

use feed::NodeName;
use feed::outbox::HubSubscription;
use feed::ports::ChangeSink;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::Notify;

/// A view's key: the feed's name and the canonical view.
pub type ViewKey = (String, String);

/// How many changes each view has seen, counted by the change sink.
#[derive(Default)]
pub struct Generations {
    inner: Mutex<HashMap<ViewKey, u64>>,
}

impl Generations {
    /// Counts a change to the view (before any task is woken, see `single_flight`).
    pub fn bump(&self, key: &ViewKey) {
        let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        match g.get_mut(key) {
            Some(n) => *n += 1,
            None => {
                g.insert(key.clone(), 1);
            }
        }
    }

    /// The changes the view has seen.
    pub fn get(&self, key: &ViewKey) -> u64 {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).get(key).copied().unwrap_or(0)
    }
}

/// One subscription's delivery task, as the rest of the hub reaches it.
pub(crate) struct Worker {
    /// Replaced whole when the subscription is renewed: a delivery takes it with an `Arc`
    /// clone, and knows by the pointer whether it changed.
    pub(super) sub: Mutex<Arc<HubSubscription>>,
    /// The feed's name (changes name feeds, subscriptions their ids).
    pub(super) feed: String,
    /// New outbox rows for its view.
    pub(super) wake: Notify,
    /// Set when the subscription ends; `ended` wakes a task waiting out a backoff.
    gone: AtomicBool,
    pub(super) ended: Notify,
}

impl Worker {
    pub(super) fn snapshot(&self) -> Arc<HubSubscription> {
        self.sub.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub(super) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }

    fn end(&self) {
        self.gone.store(true, Ordering::SeqCst);
        self.ended.notify_one();
        self.wake.notify_one();
    }
}

/// The subscriptions in force, by id and by view. Made before the store opens, so the
/// store's change sink can wake delivery tasks ([`Registry::sink`]).
#[derive(Default)]
pub struct Registry {
    inner: Mutex<Tasks>,
    /// Changes per view, bumped before any task is woken (see `Hub::reads`).
    pub(super) generations: Generations,
}

#[derive(Default)]
struct Tasks {
    by_id: HashMap<i64, Arc<Worker>>,
    /// (feed name, canonical view) → subscription ids.
    by_view: HashMap<(String, String), HashSet<i64>>,
}

impl Registry {
    pub fn new() -> Arc<Registry> {
        Arc::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tasks> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The store's change sink for the hub: wakes the tasks of every view a change entered.
    /// Never waits; the documents themselves are already in the outbox.
    pub fn sink(self: &Arc<Self>) -> ChangeSink {
        let me = self.clone();
        Box::new(move |changes| {
            let tasks = me.lock();
            for change in &changes {
                for v in &change.views {
                    let key = (change.feed.clone(), v.view.clone());
                    me.generations.bump(&key);
                    let Some(ids) = tasks.by_view.get(&key) else { continue };
                    for w in ids.iter().filter_map(|id| tasks.by_id.get(id)) {
                        w.wake.notify_one();
                    }
                }
            }
        })
    }

    /// Adds a subscription, or renews the one with its id; `Some` with a new task to run.
    pub(super) fn upsert(&self, sub: HubSubscription) -> Option<Arc<Worker>> {
        let mut tasks = self.lock();
        if let Some(w) = tasks.by_id.get(&sub.id) {
            let mut current = w.sub.lock().unwrap_or_else(PoisonError::into_inner);
            *current = Arc::new(HubSubscription { delivered: current.delivered, ..sub });
            return None;
        }
        let feed = NodeName::parse(&sub.view).map(|n| n.feed).unwrap_or_default();
        let key = (feed.clone(), sub.view.clone());
        let id = sub.id;
        let w = Arc::new(Worker {
            sub: Mutex::new(Arc::new(sub)),
            feed,
            wake: Notify::new(),
            gone: AtomicBool::new(false),
            ended: Notify::new(),
        });
        tasks.by_id.insert(id, w.clone());
        tasks.by_view.entry(key).or_default().insert(id);
        Some(w)
    }

    /// Ends the subscriptions `pick` selects; their tasks stop.
    pub(super) fn remove(&self, pick: impl Fn(&HubSubscription) -> bool) -> usize {
        let mut tasks = self.lock();
        let ids: Vec<i64> = tasks.by_id.iter().filter(|(_, w)| pick(&w.snapshot())).map(|(id, _)| *id).collect();
        for id in &ids {
            if let Some(w) = tasks.by_id.remove(id) {
                w.end();
                let key = (w.feed.clone(), w.snapshot().view.clone());
                if let Some(set) = tasks.by_view.get_mut(&key) {
                    set.remove(id);
                    if set.is_empty() {
                        tasks.by_view.remove(&key);
                    }
                }
            }
        }
        ids.len()
    }

    pub(super) fn len(&self) -> usize {
        self.lock().by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use feed::{Change, Cursor, Item, Key, Payload, ViewChange};
    use std::time::Duration;

    fn sub(id: i64, view: &str) -> HubSubscription {
        HubSubscription {
            id,
            feed: 1,
            view: view.into(),
            topic: "t".into(),
            callback: format!("http://cb/{id}"),
            secret: None,
            expires: i64::MAX,
            delivered: 0,
        }
    }

    #[tokio::test]
    async fn the_sink_wakes_the_tasks_of_the_views_a_change_entered() {
        let r = Registry::new();
        let a = r.upsert(sub(1, "f?order=modified")).unwrap();
        let b = r.upsert(sub(2, "f?order=-created")).unwrap();
        assert!(r.upsert(HubSubscription { expires: 5, ..sub(1, "f?order=modified") }).is_none(), "a renewal");
        assert_eq!(a.snapshot().expires, 5);
        let key = Key { t: 1, seq: 1 };
        let item = Item {
            id: "x".into(),
            created: key,
            modified: key,
            author: None,
            categories: vec![],
            atom_id: None,
            payload: Payload::Entry(String::new()),
        };
        let view =
            ViewChange { view: "f?order=modified".into(), count: 1, previous: None, last: Cursor { t: 1, o: 0, c: 0 } };
        (r.sink())(vec![Change { feed: "f".into(), item, created: false, views: vec![view] }]);
        tokio::time::timeout(Duration::from_secs(1), a.wake.notified()).await.expect("a is woken");
        assert!(tokio::time::timeout(Duration::from_millis(50), b.wake.notified()).await.is_err(), "b is not");
        assert_eq!(r.remove(|s| s.id == 1), 1);
        assert!(a.is_gone() && !b.is_gone());
        assert_eq!(r.len(), 1);
    }
}
