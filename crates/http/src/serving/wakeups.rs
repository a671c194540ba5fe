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
//! A view's holders can leave a [`Prefetch`]: the read they will make when woken. The
//! registry then makes it before it wakes them, so each is woken once and finds its answer
//! read, rather than woken by the change and then again by the end of a read that all of
//! them wait for (a wake-up from the reader's thread, through the runtime's shared queue).
//! Only the latest holder's prefetch is kept per view: holders that read something else read
//! it themselves, as without one. A prefetch that fails or takes over [`PREFETCH_BOUND`]
//! delays nobody past that bound: the holders are woken and read for themselves. One
//! prefetch at a time per view: changes that come during one are read together by the next
//! (under the newest generation), as the holders would have coalesced them.
//!
//! The change sink only hands changes over (`try_send`); a task does the waking, so the
//! store's writer never waits for it. If that hand-over queue is ever full, the next change
//! that gets through wakes every held request (they re-read, and those with nothing new
//! wait again): a lost wake-up must never leave a request held past an item it should see.

use feed::change::belongs;
use feed::{Change, View};
use futures::future::BoxFuture;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Changes waiting to be turned into wake-ups.
const QUEUE: usize = 4096;
/// The longest a prefetch may delay a view's holders.
pub const PREFETCH_BOUND: Duration = Duration::from_secs(1);

/// The read a view's holders make when woken, made once for them before they are (see the
/// module docs). It must be shared with them: a read made for wake-up `generation`, that
/// they find when they ask for it after being woken with it.
pub trait Prefetch: Send + Sync + 'static {
    fn read(&self, generation: u64) -> BoxFuture<'static, ()>;
}

/// A held view: its counter, and its holders' prefetch.
struct Held {
    tx: watch::Sender<u64>,
    prefetch: Arc<Prefetching>,
}

/// A view's prefetch, and the wake-ups waiting for it.
#[derive(Default)]
struct Prefetching {
    /// The latest holder's, if any holder left one.
    read: Mutex<Option<Arc<dyn Prefetch>>>,
    /// The newest generation whose holders wait for a read.
    wanted: AtomicU64,
    /// Whether a task reads for them.
    running: AtomicBool,
}

impl Prefetching {
    fn read(&self) -> Option<Arc<dyn Prefetch>> {
        self.read.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Reads for the newest generation wanted, raises `tx` to it, and again while changes
    /// came meanwhile; ends when none is left (or another task took over).
    async fn run(self: Arc<Self>, tx: watch::Sender<u64>) {
        loop {
            let generation = self.wanted.load(Ordering::SeqCst);
            if let Some(read) = self.read() {
                let _ = tokio::time::timeout(PREFETCH_BOUND, read.read(generation)).await;
            }
            raise(&tx, generation);
            self.running.store(false, Ordering::SeqCst);
            // A change that came during the read, and found this task running, is its to read.
            if self.wanted.load(Ordering::SeqCst) == generation || self.running.swap(true, Ordering::SeqCst) {
                return;
            }
        }
    }
}

/// Raises a counter to `generation`, never lowers it: wake-ups delayed by a prefetch may end
/// out of order.
fn raise(tx: &watch::Sender<u64>, generation: u64) {
    tx.send_if_modified(|g| {
        let newer = generation > *g;
        if newer {
            *g = generation;
        }
        newer
    });
}

/// The registry; see the module docs.
#[derive(Default)]
pub struct Wakeups {
    /// Feed name → view → its counter. A std mutex: held for map operations only.
    feeds: Mutex<HashMap<String, HashMap<View, Held>>>,
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
    /// The view's counter, to tell without the registry's lock whether other holders remain.
    tx: watch::Sender<u64>,
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
        if self.tx.receiver_count() > 0 {
            // Others hold the view: the last of them removes it.
            return;
        }
        let mut feeds = self.registry.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(views) = feeds.get_mut(&self.view.feed) {
            if views.get(&self.view).is_some_and(|held| held.tx.receiver_count() == 0) {
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

    /// Registers a holder of `view`, with the read it will make when woken, if it knows it
    /// (which becomes the view's prefetch).
    pub fn watch(self: &Arc<Self>, view: View, prefetch: Option<Arc<dyn Prefetch>>) -> Watch {
        let mut feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        if !feeds.contains_key(&view.feed) {
            feeds.insert(view.feed.clone(), HashMap::new());
        }
        let Some(views) = feeds.get_mut(&view.feed) else { unreachable!("inserted above") };
        if !views.contains_key(&view) {
            let tx = watch::channel(self.generation.load(Ordering::SeqCst)).0;
            views.insert(view.clone(), Held { tx, prefetch: Arc::default() });
        }
        let Some(held) = views.get_mut(&view) else { unreachable!("inserted above") };
        if let Some(p) = prefetch {
            *held.prefetch.read.lock().unwrap_or_else(PoisonError::into_inner) = Some(p);
        }
        let (tx, rx) = (held.tx.clone(), held.tx.subscribe());
        Watch { registry: self.clone(), view, rx: Some(rx), tx }
    }

    /// How many distinct views are held (for tests and metrics).
    pub fn views(&self) -> usize {
        self.feeds.lock().unwrap_or_else(PoisonError::into_inner).values().map(HashMap::len).sum()
    }

    /// Wakes the holders of every view of the change's feed that the change enters: at once,
    /// or, for a view with a prefetch, once it is read (by a task of its own, so that one
    /// view's read delays no other).
    pub fn wake(&self, change: &Change) {
        let mut prefetches = Vec::new();
        {
            let feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
            let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
            if self.lost.swap(false, Ordering::SeqCst) {
                for held in feeds.values().flat_map(HashMap::values) {
                    raise(&held.tx, generation);
                }
                return;
            }
            for (view, held) in feeds.get(&change.feed).into_iter().flatten() {
                if !belongs(view, &change.item, change.created) {
                    continue;
                }
                let p = &held.prefetch;
                if p.read.lock().unwrap_or_else(PoisonError::into_inner).is_none() {
                    raise(&held.tx, generation);
                    continue;
                }
                p.wanted.fetch_max(generation, Ordering::SeqCst);
                if !p.running.swap(true, Ordering::SeqCst) {
                    prefetches.push(p.clone().run(held.tx.clone()));
                }
            }
        }
        for prefetch in prefetches {
            tokio::spawn(prefetch);
        }
    }

    /// Wakes every holder of a view of `feed`, or of any feed: for changes committed by
    /// another instance, which are known by feed only (see `store_postgres::commit_notices`).
    /// Holders re-read, and those with nothing new wait again.
    pub fn wake_feed(&self, feed: Option<&str>) {
        let feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let views: Box<dyn Iterator<Item = &HashMap<View, Held>>> = match feed {
            Some(f) => Box::new(feeds.get(f).into_iter()),
            None => Box::new(feeds.values()),
        };
        for held in views.flat_map(HashMap::values) {
            raise(&held.tx, generation);
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
        let mut created = w.watch(view("f?order=created"), None);
        let mut created2 = w.watch(view("f?order=created"), None);
        let mut modified = w.watch(view("f?order=modified"), None);
        let mut ann = w.watch(view("f?order=modified&author=ann"), None);
        let mut other = w.watch(view("g?order=modified"), None);
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

    /// A prefetch that records the generations it was asked for and ends when `go` is true.
    struct Gated {
        asked: Mutex<Vec<u64>>,
        go: watch::Receiver<bool>,
    }

    impl Prefetch for Gated {
        fn read(&self, generation: u64) -> BoxFuture<'static, ()> {
            self.asked.lock().unwrap().push(generation);
            let mut go = self.go.clone();
            Box::pin(async move {
                let _ = go.wait_for(|g| *g).await;
            })
        }
    }

    /// A registry, a view of `f` held with a [`Gated`] prefetch, and the gate.
    fn prefetching() -> (Arc<Wakeups>, watch::Sender<bool>, Arc<Gated>, Watch) {
        let w = Wakeups::new();
        let (open, go) = watch::channel(false);
        let gated = Arc::new(Gated { asked: Mutex::new(vec![]), go });
        let prefetched = w.watch(view("f?order=created"), Some(gated.clone()));
        (w, open, gated, prefetched)
    }

    #[tokio::test]
    async fn holders_are_woken_once_their_prefetch_is_read_or_its_bound_passes() {
        let (w, open, gated, mut prefetched) = prefetching();
        let mut other = w.watch(view("f?order=modified"), None);
        w.wake(&change("f", true, None));
        assert!(woken(&mut other).await, "a view without a prefetch is woken at once");
        assert!(!woken(&mut prefetched).await, "not before its read");
        assert_eq!(*gated.asked.lock().unwrap(), [other.generation()], "read for the wake-up's generation");
        open.send_replace(true);
        assert!(woken(&mut prefetched).await, "woken once read");
        assert_eq!(prefetched.generation(), other.generation());
        // A read that never ends delays its holders by the bound, no more.
        open.send_replace(false);
        w.wake(&change("f", true, None));
        assert!(!woken(&mut prefetched).await);
        tokio::time::sleep(PREFETCH_BOUND).await;
        assert!(woken(&mut prefetched).await, "woken when the bound passed");
    }

    #[tokio::test]
    async fn changes_that_come_during_a_prefetch_are_read_together_by_the_next() {
        let (w, open, gated, mut prefetched) = prefetching();
        w.wake(&change("f", true, None));
        while gated.asked.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        // Two changes while the first read goes on.
        w.wake(&change("f", true, None));
        w.wake(&change("f", true, None));
        tokio::task::yield_now().await;
        let first = gated.asked.lock().unwrap().clone();
        assert_eq!(first.len(), 1, "one read at a time: {first:?}");
        open.send_replace(true);
        assert!(woken(&mut prefetched).await);
        while prefetched.generation() < first[0] + 2 {
            assert!(woken(&mut prefetched).await, "raised to the newest change");
        }
        let asked = gated.asked.lock().unwrap().clone();
        assert_eq!(asked, [first[0], first[0] + 2], "the two later changes read together");
    }

    #[tokio::test]
    async fn a_counter_never_goes_back() {
        let (tx, rx) = watch::channel(5);
        raise(&tx, 4);
        assert_eq!(*rx.borrow(), 5);
        raise(&tx, 7);
        assert_eq!(*rx.borrow(), 7);
    }
}
