//! One outbox read for all the subscriptions of a view.
//!
//! A change to a view with ten thousand subscriptions wakes ten thousand delivery tasks,
//! and each would read the same outbox rows after the same progress mark. Instead, the
//! first reads them (holding the view's lock, so the others wait rather than read too), and
//! the rest take its result, as long as no change entered the view since: every change
//! bumps the view's generation ([`Generations::bump`], from the change sink) before any
//! task is woken, and a read is kept only under the generation seen *before* it started.
//! A read that raced a commit is thus never used after that commit's wake-up.

use feed::outbox::OutboxEntry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// A view's key: the feed's name and the canonical view.
pub type ViewKey = (String, String);

/// How many changes each view has seen, counted by the change sink.
#[derive(Default)]
pub struct Generations {
    inner: Mutex<HashMap<ViewKey, u64>>,
}

impl Generations {
    pub fn bump(&self, key: &ViewKey) {
        let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        match g.get_mut(key) {
            Some(n) => *n += 1,
            None => {
                g.insert(key.clone(), 1);
            }
        }
    }

    pub fn get(&self, key: &ViewKey) -> u64 {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).get(key).copied().unwrap_or(0)
    }
}

/// The last read of a view's outbox.
struct Read {
    generation: u64,
    after: i64,
    rows: Arc<Vec<OutboxEntry>>,
}

/// The last read of each view, behind the view's own async lock.
#[derive(Default)]
pub struct SharedReads {
    views: Mutex<HashMap<ViewKey, Arc<tokio::sync::Mutex<Option<Read>>>>>,
}

impl SharedReads {
    /// The rows after `after` for `key`: the last read's when it was made at `generation`
    /// after the same mark, else what `read` returns (then kept for the others).
    pub async fn get<E, F, Fut>(
        &self,
        key: &ViewKey,
        generation: u64,
        after: i64,
        read: F,
    ) -> Result<Arc<Vec<OutboxEntry>>, E>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Vec<OutboxEntry>, E>>,
    {
        let slot = {
            let mut views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
            views.entry(key.clone()).or_default().clone()
        };
        let mut last = slot.lock().await;
        if let Some(r) = last.as_ref().filter(|r| r.generation == generation && r.after == after) {
            return Ok(r.rows.clone());
        }
        let rows = Arc::new(read().await?);
        *last = Some(Read { generation, after, rows: rows.clone() });
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn one_read_serves_a_generation_and_a_mark() {
        let (reads, gens) = (SharedReads::default(), Generations::default());
        let key: ViewKey = ("f".into(), "f?order=modified".into());
        let n = AtomicUsize::new(0);
        let read = || async {
            n.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ()>(Vec::new())
        };
        for _ in 0..3 {
            reads.get(&key, gens.get(&key), 0, read).await.unwrap();
        }
        assert_eq!(n.load(Ordering::SeqCst), 1, "one read for three tasks");
        reads.get(&key, gens.get(&key), 5, read).await.unwrap();
        assert_eq!(n.load(Ordering::SeqCst), 2, "another mark reads again");
        gens.bump(&key);
        reads.get(&key, gens.get(&key), 5, read).await.unwrap();
        assert_eq!(n.load(Ordering::SeqCst), 3, "a change since reads again");
    }
}
