//! Each feed's change generation, which validates every answer about the feed without
//! reading its items; both faces keep their hot answers by it (HTTP's `answer_cache`,
//! XMPP's `ready_pages`).
//!
//! The generation is the feed's last modified seq: every publish, update and retraction
//! stamps a new, greater one, and it is kept in the store, so it survives restarts and
//! means the same in every process. An answer about a feed (a page of one of its views, an
//! archive document) is a function of the request and the feed's items, so it can change
//! only when the generation does: an HTTP ETag is derived from the two (the HTTP face's
//! `answer_cache`), and a 304 needs no item read.
//!
//! Where this process makes every commit of the store (SQLite), the generations are kept
//! in memory: the change sink raises a feed's on the store's writer thread, after the
//! commit and *before* its writers are answered, so a client that was told its publish is
//! done never gets an answer validated by the generation before it. Where other processes
//! commit too (PostgreSQL), whose changes are known here only later, every request reads
//! its feed's generation from the store: one row, no item.
//!
//! An answer must never carry a generation newer than what it shows: a request reads the
//! generation first and its items after, so what it shows includes at least every change up
//! to that generation (possibly one more, which only costs a later 200 where a 304 could
//! have been).

use crate::ports::{ChangeSink, Store};
use crate::service::{Readable, Service};
use crate::{Change, FeedError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// The feeds' generations; see the module docs.
pub struct Generations {
    /// Feed name → generation, when every commit is seen here; `None`: read from the store.
    local: Option<Mutex<HashMap<String, i64>>>,
}

impl Generations {
    /// Generations kept in memory: for a store only this process writes.
    pub fn local() -> Arc<Generations> {
        Arc::new(Generations { local: Some(Mutex::default()) })
    }

    /// Generations read from the store on each request: for a store other processes write.
    pub fn from_store() -> Arc<Generations> {
        Arc::new(Generations { local: None })
    }

    /// The change sink that keeps the generations in memory up to date (a no-op for
    /// [`from_store`](Self::from_store)). It runs on the store's writer thread and only takes a
    /// lock for a map update.
    pub fn sink(self: &Arc<Self>) -> ChangeSink {
        let me = self.clone();
        Box::new(move |changes: Vec<Change>| me.saw(&changes))
    }

    /// Raises the generations of the changes' feeds.
    pub fn saw(&self, changes: &[Change]) {
        let Some(local) = &self.local else { return };
        let mut feeds = local.lock().unwrap_or_else(PoisonError::into_inner);
        for c in changes {
            raise(&mut feeds, &c.feed, c.item.modified.seq);
        }
    }

    /// The generation of `view`'s feed (unknown to the store: refused as a pull would be).
    /// The policy was asked when `view` was made.
    pub async fn get<S: Store>(&self, svc: &Service<S>, view: &Readable) -> Result<i64, FeedError> {
        let feed = &view.view().feed;
        if let Some(local) = &self.local
            && let Some(&g) = local.lock().unwrap_or_else(PoisonError::into_inner).get(feed)
        {
            return Ok(g);
        }
        let g = svc.generation(view).await?;
        if let Some(local) = &self.local {
            // A change committed while the row was read has already raised it further: keep
            // the greater.
            raise(&mut local.lock().unwrap_or_else(PoisonError::into_inner), feed, g);
        }
        Ok(g)
    }
}

fn raise(feeds: &mut HashMap<String, i64>, feed: &str, g: i64) {
    match feeds.get_mut(feed) {
        Some(at) => *at = (*at).max(g),
        None => {
            feeds.insert(feed.to_string(), g);
        }
    }
}
