//! One store read for everyone asking the same thing at the same moment.
//!
//! A publish wakes every held request and every WebSub subscription of the views it enters
//! at once: ten thousand long-polls of one view, or ten thousand callbacks, would otherwise
//! make ten thousand identical reads. Callers name what they ask by a *group* (the view, or
//! the actor and request) and a *tag* (what the answer depends on besides: the wake-up's
//! generation, the progress mark). The first caller of a (group, tag) starts the read; the
//! others, while it is in flight and after it ended, get its answer, until a caller of the
//! same group with another tag replaces it. A failed read is not kept: the next caller reads
//! again.
//!
//! Sharing is safe only for a read that began after the change its sharers were woken by,
//! or one could be handed a page from before that change (and wait again, past it). So the
//! tag holds a generation that a change bumps *before* it wakes anyone: a read for
//! generation `g` is started by a caller that already saw `g`, hence after the commit
//! behind it.

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};

/// Groups kept before finished reads are forgotten (in-flight ones always stay).
const KEEP: usize = 4096;

type Read<V, E> = Shared<BoxFuture<'static, Result<V, E>>>;
/// A group's read and the tag it was made for.
type Entry<T, V, E> = (T, Read<V, E>);

/// Reads by group, each with the tag it was made for.
pub struct SingleFlight<G, T, V, E> {
    map: Mutex<HashMap<G, Entry<T, V, E>>>,
}

impl<G, T, V, E> Default for SingleFlight<G, T, V, E> {
    fn default() -> Self {
        SingleFlight { map: Mutex::new(HashMap::new()) }
    }
}

impl<G, T, V, E> SingleFlight<G, T, V, E>
where
    G: Hash + Eq,
    T: PartialEq,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// The answer of `read` for `group` at `tag`, shared as the module docs say.
    pub async fn get<F, Fut>(&self, group: G, tag: T, read: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        let flight = {
            let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            let failed = |f: &Read<V, E>| f.peek().is_some_and(Result::is_err);
            match map.get(&group) {
                Some((t, f)) if *t == tag && !failed(f) => f.clone(),
                _ => {
                    if map.len() >= KEEP {
                        map.retain(|_, (_, f)| f.peek().is_none());
                    }
                    let f = read().boxed().shared();
                    map.insert(group, (tag, f.clone()));
                    f
                }
            }
        };
        flight.await
    }

    /// Groups held now (finished reads included).
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::watch;

    type Flights = SingleFlight<&'static str, u64, usize, String>;

    /// A read that counts itself and answers, once `go` is true, with its own number.
    fn gated(reads: &Arc<AtomicUsize>, go: &watch::Receiver<bool>) -> BoxFuture<'static, Result<usize, String>> {
        let n = reads.fetch_add(1, Ordering::SeqCst) + 1;
        let mut go = go.clone();
        async move {
            let _ = go.wait_for(|g| *g).await;
            Ok(n)
        }
        .boxed()
    }

    #[tokio::test]
    async fn callers_of_one_tag_share_a_read_and_another_tag_reads_again() {
        let flights = Arc::new(Flights::default());
        let reads = Arc::new(AtomicUsize::new(0));
        let (open, go) = watch::channel(false);
        let ask = |group: &'static str, tag: u64| {
            let (flights, reads, go) = (flights.clone(), reads.clone(), go.clone());
            tokio::spawn(async move { flights.get(group, tag, || gated(&reads, &go)).await })
        };
        let waiting: Vec<_> = (0..10).map(|_| ask("a", 7)).collect();
        let other_group = ask("b", 7);
        while flights.len() < 2 {
            tokio::task::yield_now().await;
        }
        open.send_replace(true);
        let mut answers = Vec::new();
        for w in waiting {
            answers.push(w.await.unwrap().unwrap());
        }
        assert!(answers.iter().all(|&a| a == answers[0]), "one answer for all: {answers:?}");
        assert_ne!(other_group.await.unwrap().unwrap(), answers[0]);
        assert_eq!(reads.load(Ordering::SeqCst), 2, "two reads for eleven callers");
        // A finished read still serves its tag; a new tag reads again.
        assert_eq!(ask("a", 7).await.unwrap().unwrap(), answers[0]);
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        assert_eq!(ask("a", 8).await.unwrap().unwrap(), 3);
    }

    #[tokio::test]
    async fn a_failed_read_is_not_kept() {
        let flights = Flights::default();
        let n = AtomicUsize::new(0);
        let read = || {
            let k = n.fetch_add(1, Ordering::SeqCst);
            async move { if k == 0 { Err("busy".to_string()) } else { Ok(k) } }
        };
        assert!(flights.get("a", 1, read).await.is_err());
        assert_eq!(flights.get("a", 1, read).await, Ok(1), "read again after the failure");
        assert_eq!(flights.get("a", 1, read).await, Ok(1), "then kept");
    }
}
