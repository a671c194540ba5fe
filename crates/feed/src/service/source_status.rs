//! What the service knows of each feed's source (SPEC §13), for `list-feeds`: the producer
//! that fetches sources writes it, the admin commands read it. Plain values, kept in
//! memory: it describes this process's fetching, which starts again with the process.
//! What must outlive the process (where a source moved, its validators) is the store's
//! [`SourceState`], read and saved through [`Service::source_state`] and
//! [`Service::save_source_state`].

use super::Service;
use crate::FeedError;
use crate::ports::{SourceState, Store};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// One source's state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceStatus {
    /// Where it is fetched from now (a permanent redirect moves it).
    pub location: String,
    /// The last fetch that succeeded (a 304 included), Unix ms.
    pub last_success: Option<i64>,
    /// The last failure, while the source is failing.
    pub last_error: Option<String>,
    /// When it is fetched next, Unix ms; `None` when it is not fetched (stopped by `410`,
    /// or fetched by another instance).
    pub next_fetch: Option<i64>,
    /// Why it is not fetched, when it is not.
    pub idle: Option<String>,
}

impl SourceStatus {
    /// One line for `list-feeds`.
    pub fn describe(&self) -> String {
        let time = |ms: Option<i64>| {
            ms.and_then(chrono::DateTime::from_timestamp_millis)
                .map_or_else(|| "never".to_string(), |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        };
        let mut s = format!("source {}, last success {}", self.location, time(self.last_success));
        if let Some(e) = &self.last_error {
            s.push_str(&format!(", last error: {e}"));
        }
        match (&self.idle, self.next_fetch) {
            (Some(why), _) => s.push_str(&format!(", not fetched: {why}")),
            (None, next) => s.push_str(&format!(", next fetch {}", time(next))),
        }
        s
    }
}

/// Every source's state, by feed name. A std mutex: held only to copy a value in or out.
#[derive(Debug, Default)]
pub struct SourceBoard(Mutex<BTreeMap<String, SourceStatus>>);

impl SourceBoard {
    pub fn set(&self, feed: &str, status: SourceStatus) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(feed.to_string(), status);
        }
    }

    pub fn get(&self, feed: &str) -> Option<SourceStatus> {
        self.0.lock().ok().and_then(|m| m.get(feed).cloned())
    }
}

impl<S: Store> Service<S> {
    /// The board the source fetchers report to.
    pub fn sources(&self) -> &Arc<SourceBoard> {
        &self.sources
    }

    /// What the store keeps of `feed`'s source (where it moved, its validators), if the
    /// feed exists and anything was saved.
    pub async fn source_state(&self, feed: &str) -> Result<Option<SourceState>, FeedError> {
        let name = feed.to_string();
        self.store
            .read(move |tx| match tx.feed(&name)? {
                Some(row) => Ok(tx.source_state(row.id)?),
                None => Ok(None),
            })
            .await
    }

    /// Saves `state` as what the store keeps of `feed`'s source (nothing when the feed does
    /// not exist).
    pub async fn save_source_state(&self, feed: &str, state: SourceState) -> Result<(), FeedError> {
        let name = feed.to_string();
        self.store
            .write(move |tx| {
                if let Some(row) = tx.feed_for_update(&name)? {
                    tx.put_source_state(row.id, &state)?;
                }
                Ok(())
            })
            .await
    }
}
