//! Wake-ups for held requests (long-polls and event streams), fed from the change stream.
//!
//! A held request registers its view and gets a `watch` receiver; it then re-reads its view
//! (so nothing committed between its first read and its registration is missed) and waits
//! for the receiver to change. A committed change bumps the counter of every registered view
//! of its feed that the item [`belongs`] to, and only those, which wakes all their holders
//! at once. One counter per view, however many requests hold it: ten thousand long-polls of
//! one view are ten thousand waiting futures on one `watch`, not threads or polling loops.
//!
//! The counters hold a wake-up generation, global and only growing: a woken request knows
//! which wake-up it saw, so identical re-reads for the same one can be shared
//! ([`super::single_flight`]).
//!
//! The change sink only hands changes over (`try_send`); a task does the waking, so the
//! store's writer never waits for it. If that hand-over queue is ever full, the next change
//! that gets through wakes every held request (they re-read, and those with nothing new
//! wait again): a lost wake-up must never leave a request held past an item it should see.

use feed::change::belongs;
use feed::{Change, View};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::{mpsc, watch};

/// Changes waiting to be turned into wake-ups.
const QUEUE: usize = 4096;

/// The registry; see the module docs.
#[derive(Default)]
pub struct Wakeups {
    /// Feed name → view → its counter. A std mutex: held for map operations only.
    feeds: Mutex<HashMap<String, HashMap<View, watch::Sender<u64>>>>,
    /// Set when a change could not be handed over.
    lost: AtomicBool,
    /// The last wake-up's generation.
    generation: AtomicU64,
}

/// A registration; dropping it unregisters (the view's counter goes when its last holder does).
pub struct Watch {
    registry: Arc<Wakeups>,
    view: View,
    rx: Option<watch::Receiver<u64>>,
}

impl Watch {
    /// The view held.
    pub fn view(&self) -> &View {
        &self.view
    }

    /// The generation of the view's last wake-up (or of the registration, if none since).
    pub fn generation(&self) -> u64 {
        self.rx.as_ref().map_or(0, |rx| *rx.borrow())
    }

    /// Resolves when a change enters the view after the registration (or a previous wait),
    /// with the generation of the wake-up.
    pub async fn changed(&mut self) -> u64 {
        match &mut self.rx {
            Some(rx) => {
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await
                }
                *rx.borrow_and_update()
            }
            None => std::future::pending().await,
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        drop(self.rx.take());
        let mut feeds = self.registry.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(views) = feeds.get_mut(&self.view.feed) {
            if views.get(&self.view).is_some_and(|tx| tx.receiver_count() == 0) {
                views.remove(&self.view);
            }
            if views.is_empty() {
                feeds.remove(&self.view.feed);
            }
        }
    }
}

impl Wakeups {
    pub fn new() -> Arc<Wakeups> {
        Arc::default()
    }

    /// Registers a holder of `view`.
    pub fn watch(self: &Arc<Self>, view: View) -> Watch {
        let mut feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        let views = feeds.entry(view.feed.clone()).or_default();
        let rx = match views.get(&view) {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = watch::channel(self.generation.load(Ordering::SeqCst));
                views.insert(view.clone(), tx);
                rx
            }
        };
        Watch { registry: self.clone(), view, rx: Some(rx) }
    }

    /// How many distinct views are held (for tests and metrics).
    pub fn views(&self) -> usize {
        self.feeds.lock().unwrap_or_else(PoisonError::into_inner).values().map(HashMap::len).sum()
    }

    /// Wakes the holders of every view of the change's feed that the change enters.
    pub fn wake(&self, change: &Change) {
        let feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        if self.lost.swap(false, Ordering::SeqCst) {
            for tx in feeds.values().flat_map(HashMap::values) {
                tx.send_replace(generation);
            }
            return;
        }
        if let Some(views) = feeds.get(&change.feed) {
            for (view, tx) in views {
                if belongs(view, &change.item, change.created) {
                    tx.send_replace(generation);
                }
            }
        }
    }

    /// Wakes every holder of a view of `feed`, or of any feed: for changes committed by
    /// another instance, which are known by feed only (see `store_postgres::commit_notices`).
    /// Holders re-read, and those with nothing new wait again.
    pub fn wake_feed(&self, feed: Option<&str>) {
        let feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let views: Box<dyn Iterator<Item = &HashMap<View, watch::Sender<u64>>>> = match feed {
            Some(f) => Box::new(feeds.get(f).into_iter()),
            None => Box::new(feeds.values()),
        };
        for tx in views.flat_map(HashMap::values) {
            tx.send_replace(generation);
        }
    }

    /// The store-side half: a change sink that hands changes to [`run`](Self::run) without
    /// ever waiting.
    pub fn sink(self: &Arc<Self>) -> (feed::ports::ChangeSink, mpsc::Receiver<Change>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let me = self.clone();
        let sink = Box::new(move |changes: Vec<Change>| {
            for c in changes {
                if tx.try_send(c).is_err() {
                    me.lost.store(true, Ordering::SeqCst);
                }
            }
        });
        (sink, rx)
    }

    /// Wakes holders for each change handed over, until the sink is gone.
    pub async fn run(self: Arc<Self>, mut changes: mpsc::Receiver<Change>) {
        while let Some(c) = changes.recv().await {
            self.wake(&c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use feed::{Item, Key, NodeName, Order, Payload};
    use std::time::Duration;

    fn view(node: &str) -> View {
        NodeName::parse(node).unwrap().resolve(Order::NEWEST_FIRST)
    }

    fn change(feed: &str, created: bool, author: Option<&str>) -> Change {
        let item = Item {
            id: "i".into(),
            created: Key { t: 1, seq: 1 },
            modified: Key { t: 1, seq: 1 },
            author: author.map(String::from),
            categories: vec![],
            atom_id: None,
            payload: Payload::Entry(String::new()),
        };
        Change { feed: feed.into(), item, created, views: vec![] }
    }

    async fn woken(h: &mut Watch) -> bool {
        tokio::time::timeout(Duration::from_millis(50), h.changed()).await.is_ok()
    }

    #[tokio::test]
    async fn a_change_wakes_the_views_it_enters_and_only_those() {
        let w = Wakeups::new();
        let mut created = w.watch(view("f?order=created"));
        let mut created2 = w.watch(view("f?order=created"));
        let mut modified = w.watch(view("f?order=modified"));
        let mut ann = w.watch(view("f?order=modified&author=ann"));
        let mut other = w.watch(view("g?order=modified"));
        assert_eq!(w.views(), 4);
        w.wake(&change("f", false, Some("bob")));
        assert!(!woken(&mut created).await, "an update does not enter a created view");
        assert!(woken(&mut modified).await);
        assert!(!woken(&mut ann).await, "filtered out");
        assert!(!woken(&mut other).await, "another feed");
        w.wake(&change("f", true, Some("ann")));
        assert!(woken(&mut created).await && woken(&mut created2).await && woken(&mut ann).await);
        drop((created, created2, modified, ann, other));
        assert_eq!(w.views(), 0, "views go with their last holder");
    }
}
