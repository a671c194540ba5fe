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

use crate::feed::FeedError;
use crate::feed::page::Page;
use crate::feed::ports::Store;
use crate::feed::service::{PullRequest, Service};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared, WeakShared};
use std::collections::HashMap;
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
        let key = Key { actor: actor.to_string(), req: req.clone(), generation };
        let flight: Flight = {
            let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            match map.get(&key).and_then(WeakShared::upgrade) {
                Some(f) => f,
                None => {
                    map.retain(|_, f| f.upgrade().is_some());
                    let (svc, me, k) = (svc.clone(), self.clone(), key.clone());
                    let f = async move {
                        let page = svc.pull(&k.actor, k.req.clone()).await;
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

    /// Reads in flight now (for tests).
    pub fn in_flight(&self) -> usize {
        self.map.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}
