//! One store read for many woken long-polls.
//!
//! A publish wakes every held request of the views it enters at once; ten thousand polls
//! of one view, all asking the same thing, would otherwise make ten thousand identical
//! reads of the store. Woken requests that ask the same (actor, request) for the same
//! wake-up share one read instead: the first starts it, the others wait for its answer.
//!
//! Sharing is safe only for a read that began after the wake-up its sharers saw, or one
//! could be handed a page from before the item that woke it (and wait again, past it). So
//! the key holds the wake-up's generation (`longpoll::Held::changed`), which is global and
//! only grows: a read for generation `g` is started by a request that already saw `g`, hence
//! after the commit behind it. A flight leaves the table when it ends; one whose requests
//! all went away is found dead (`WeakShared`) and started afresh.

use feed::FeedError;
use feed::paging::Page;
use feed::ports::Store;
use feed::service::{PullRequest, Service};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared, WeakShared};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

/// A read, as every caller waiting for it holds it.
type Read = BoxFuture<'static, Result<Page, FeedError>>;
type Flight = Shared<Read>;

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Key {
    actor: String,
    req: PullRequest,
    generation: u64,
}

/// Reads in flight, by what they ask.
#[derive(Default)]
pub struct Flights {
    map: Mutex<HashMap<Key, WeakShared<Read>>>,
}

impl Flights {
    /// `svc.pull(actor, req)`, shared with every other caller asking the same for the same
    /// wake-up `generation`.
    pub async fn pull<S: Store>(
        self: &Arc<Self>,
        svc: &Service<S>,
        actor: &str,
        req: &PullRequest,
        generation: u64,
    ) -> Result<Page, FeedError> {
        let svc = svc.clone();
        self.share(actor, req, generation, move |actor, req| async move { svc.pull(&actor, req).await }).await
    }

    /// `read(actor, req)`, unless a read of the same key is in flight: then its answer.
    async fn share<F, Fut>(
        self: &Arc<Self>,
        actor: &str,
        req: &PullRequest,
        generation: u64,
        read: F,
    ) -> Result<Page, FeedError>
    where
        F: FnOnce(String, PullRequest) -> Fut,
        Fut: Future<Output = Result<Page, FeedError>> + Send + 'static,
    {
        let key = Key { actor: actor.to_string(), req: req.clone(), generation };
        let flight: Flight = {
            let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            match map.get(&key).and_then(WeakShared::upgrade) {
                Some(f) => f,
                None => {
                    map.retain(|_, f| f.upgrade().is_some());
                    let (me, k) = (self.clone(), key.clone());
                    let reading = read(key.actor.clone(), key.req.clone());
                    let f = async move {
                        let page = reading.await;
                        me.map.lock().unwrap_or_else(PoisonError::into_inner).remove(&k);
                        page
                    }
                    .boxed()
                    .shared();
                    if let Some(weak) = f.downgrade() {
                        map.insert(key, weak);
                    }
                    f
                }
            }
        };
        flight.await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::watch;

    /// A read that counts itself and answers once `go` is true, with a page of `count` items.
    fn gated(
        reads: &Arc<AtomicUsize>,
        go: &watch::Receiver<bool>,
    ) -> impl FnOnce(String, PullRequest) -> futures::future::BoxFuture<'static, Result<Page, FeedError>> + use<> {
        let (reads, mut go) = (reads.clone(), go.clone());
        move |_, _| {
            let n = reads.fetch_add(1, Ordering::SeqCst) as u64 + 1;
            async move {
                let _ = go.wait_for(|g| *g).await;
                Ok(Page { count: n, ..Page::default() })
            }
            .boxed()
        }
    }

    #[tokio::test]
    async fn callers_of_one_wake_up_share_a_read_and_later_ones_read_again() {
        let flights = Arc::new(Flights::default());
        let reads = Arc::new(AtomicUsize::new(0));
        let (open, go) = watch::channel(false);
        let req = PullRequest { node: "f?order=created".into(), ..PullRequest::default() };
        let waiting: Vec<_> = (0..10)
            .map(|_| {
                let (flights, req, read) = (flights.clone(), req.clone(), gated(&reads, &go));
                tokio::spawn(async move { flights.share("a@x", &req, 7, read).await })
            })
            .collect();
        // Another actor, or another wake-up, is another read.
        let other_actor = {
            let (flights, req, read) = (flights.clone(), req.clone(), gated(&reads, &go));
            tokio::spawn(async move { flights.share("b@x", &req, 7, read).await })
        };
        let other_generation = {
            let (flights, req, read) = (flights.clone(), req.clone(), gated(&reads, &go));
            tokio::spawn(async move { flights.share("a@x", &req, 8, read).await })
        };
        while flights.map.lock().unwrap().len() < 3 {
            tokio::task::yield_now().await;
        }
        open.send_replace(true);
        let mut counts = Vec::new();
        for w in waiting {
            counts.push(w.await.unwrap().unwrap().count);
        }
        assert!(counts.iter().all(|&c| c == counts[0]), "one answer for all: {counts:?}");
        assert_ne!(other_actor.await.unwrap().unwrap().count, counts[0]);
        assert_ne!(other_generation.await.unwrap().unwrap().count, counts[0]);
        assert_eq!(reads.load(Ordering::SeqCst), 3, "three reads for twelve callers");
        // Finished flights leave the table: the same key later reads afresh.
        assert_eq!(flights.map.lock().unwrap().len(), 0);
        let again = flights.share("a@x", &req, 7, gated(&reads, &go)).await.unwrap();
        assert_eq!(again.count, 4);
    }
}
