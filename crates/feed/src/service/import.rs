//! Imports from a source (SPEC §13): the entries of one fetch, already in publishing order,
//! applied to a feed in ONE write transaction. The delta against what the feed holds is
//! worked out inside that transaction, so it is always against the committed state: a crash
//! before the commit leaves nothing (the next fetch imports the same entries again), a
//! crash after it leaves everything (the next fetch finds them unchanged). Nothing is
//! imported twice and nothing is lost, whichever instance fetches next.
//!
//! The payload comparison is a byte comparison of the stored entry and the new one: two
//! payloads have equal digests exactly when they are equal, and the bytes are already at
//! hand in the transaction. One exception ([`unchanged`]): an entry without a `published`
//! time whose only difference is its `updated` time is unchanged, since a source entry with
//! no time at all is given the time of each fetch as its `updated`.

use super::{Service, no_feed};
use crate::error::FeedError;
use crate::item::{Entry, Payload};
use crate::ports::Store;

/// One source entry as the delta sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incoming {
    /// The item id derived from the source entry's id.
    pub id: String,
    pub change: IncomingChange,
}

/// What the source says of an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IncomingChange {
    /// The entry as it is now (written as Atom).
    Entry(Entry),
    /// An RFC 6721 `at:deleted-entry` names it.
    Deleted,
}

/// What one import changed, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Imported {
    pub published: u64,
    pub updated: u64,
    pub unchanged: u64,
    pub retracted: u64,
    /// Entries over `[limits] max_payload_bytes`, left out.
    pub too_big: u64,
}

impl Imported {
    /// Whether anything was committed.
    pub fn changed(&self) -> bool {
        self.published + self.updated + self.retracted > 0
    }
}

impl<S: Store> Service<S> {
    /// Applies `entries` (in publishing order: oldest first) to the configured feed `feed`:
    /// an unknown id is published, a known one whose payload differs is updated, an equal
    /// one is left alone, a deleted one becomes a tombstone (an unknown deleted id, or one
    /// already a tombstone, changes nothing). All of it in one transaction.
    pub async fn import(&self, feed: &str, entries: Vec<Incoming>) -> Result<Imported, FeedError> {
        let (now, order) = ((self.clock)(), self.policy.feed(feed).order);
        let limit = self.policy.limits.max_payload_bytes;
        let name = feed.to_string();
        self.store
            .write(move |tx| {
                let mut row = tx.feed_for_update(&name)?.ok_or_else(|| no_feed(&name))?;
                let mut done = Imported::default();
                let n = entries.len() as i64;
                for (i, Incoming { id, change }) in entries.into_iter().enumerate() {
                    // Entry i of n is stamped n-1-i ms before now (never before the feed's
                    // clock: the intents take the later of the two). A history import
                    // stamped all at one millisecond would put thousands of items at one T,
                    // and every cursor among them would carry a checksum over those ties.
                    let now = now - (n - 1 - i as i64);
                    let old = tx.item(row.id, &id)?;
                    match change {
                        IncomingChange::Entry(entry) if entry.xml.len() > limit => done.too_big += 1,
                        IncomingChange::Entry(entry) => match old.map(|o| o.payload) {
                            Some(Payload::Entry(xml)) if unchanged(&xml, &entry.xml) => done.unchanged += 1,
                            stored => {
                                tx.publish(&mut row, id, entry, now, order)?;
                                if stored.is_some() { done.updated += 1 } else { done.published += 1 }
                            }
                        },
                        IncomingChange::Deleted => match old {
                            Some(o) if !o.is_deleted() => {
                                tx.retract(&mut row, &id, now, order)?;
                                done.retracted += 1;
                            }
                            _ => done.unchanged += 1,
                        },
                    }
                }
                Ok(done)
            })
            .await
    }

    /// How many items `feed` holds (tombstones included), and which of `ids` it holds: what
    /// a source's history walk asks before it imports.
    pub async fn source_holds(&self, feed: &str, ids: Vec<String>) -> Result<(u64, Vec<bool>), FeedError> {
        let name = feed.to_string();
        self.store
            .read(move |tx| {
                let row = tx.feed(&name)?.ok_or_else(|| no_feed(&name))?;
                let mut held = Vec::with_capacity(ids.len());
                for id in &ids {
                    held.push(tx.item(row.id, id)?.is_some());
                }
                Ok((row.items, held))
            })
            .await
    }

    /// The store's id of a feed (what push shards are cut by), if it exists.
    pub async fn feed_id(&self, feed: &str) -> Result<Option<i64>, FeedError> {
        let name = feed.to_string();
        self.store.read(move |tx| Ok(tx.feed(&name)?.map(|f| f.id))).await
    }
}

/// Whether the stored entry `stored` says what the source's entry `new` says: byte-equal,
/// or, when `new` has no `published` time, equal but for their `updated` times (an entry
/// with no time of its own is given the fetch's, different at each fetch; it changes when
/// something else does).
fn unchanged(stored: &str, new: &str) -> bool {
    use crate::atom::ATOM;
    if stored == new {
        return true;
    }
    let parse = |xml: &str| xml.parse::<minidom::Element>().ok();
    let (Some(mut old), Some(mut new)) = (parse(stored), parse(new)) else { return false };
    if new.has_child("published", ATOM) {
        return false;
    }
    old.remove_child("updated", ATOM);
    new.remove_child("updated", ATOM);
    old == new
}

#[cfg(test)]
mod tests {
    use super::unchanged;

    #[test]
    fn only_an_updated_time_of_an_entry_without_published_is_no_change() {
        let e = |inner: &str| format!("<entry xmlns='http://www.w3.org/2005/Atom'><id>x</id>{inner}</entry>");
        let at = |t: &str| format!("<title>T</title><updated>{t}</updated>");
        assert!(unchanged(&e(&at("2025-01-01T00:00:00Z")), &e(&at("2025-01-01T00:00:00Z"))));
        assert!(unchanged(&e(&at("2025-01-01T00:00:00Z")), &e(&at("2025-01-02T00:00:00Z"))));
        let edited = e("<title>T2</title><updated>2025-01-02T00:00:00Z</updated>");
        assert!(!unchanged(&e(&at("2025-01-01T00:00:00Z")), &edited));
        let published = |t: &str| e(&format!("<published>2024-01-01T00:00:00Z</published>{}", at(t)));
        assert!(!unchanged(&published("2025-01-01T00:00:00Z"), &published("2025-01-02T00:00:00Z")));
    }
}
