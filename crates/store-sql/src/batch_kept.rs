//! What a writer's batch keeps of what its closures read and wrote, for the later ones: the
//! rows of the feeds it has locked, the views that follow each feed, the items it knows, and
//! the ids that share a feed's newest millisecond. Publishes to one feed come in runs (a
//! batch is whatever queued while the last one ran), and each would otherwise read all of
//! them again: on PostgreSQL, a round trip each.
//!
//! - A feed's row is the row for as long as the batch lasts: on PostgreSQL the batch holds
//!   its lock until COMMIT; on SQLite the one writer thread is the only one that changes
//!   feed rows. Every change to the row goes through the transaction, which keeps it here.
//! - The views that follow a feed are kept until a closure of the batch changes
//!   subscriptions. A subscription another process commits while the batch runs was
//!   answered after the batch's publishes were queued (they were all queued when it began),
//!   so none of them owes it a push.
//! - An item of a locked feed is known once the batch has read it (or learnt it is absent)
//!   or written it: every write of an item locks its feed first, so no other process changes
//!   it before the batch commits.
//! - The ids at a feed's newest modification time, in modified order, are known once the
//!   batch stamps a time past the feed's newest (then the item is alone there) and as it
//!   stamps more at that time: what a publish's cursor is made of.
//! - What a store owes a feed's row and its counts, where it writes them once for the batch
//!   rather than once per publish ([`Owed`]): it writes them before anything it reads (a
//!   read goes out after the writes before it) and before the COMMIT.
//!
//! A closure that fails gives back what it found of the feeds and their views, as its
//! savepoint is rolled back, and the batch forgets the items and ties it knew (a later read
//! asks the database, which is always right); a batch that fails takes everything with it.

use crate::driver::Followed;
use feed::Item;
use feed::ports::FeedRow;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

/// At most this many ids are kept at one millisecond of one feed; past it, the database is
/// asked (a burst that large is rare, and copying the list would cost more).
const MAX_KEPT_TIES: usize = 256;

/// See the module docs.
#[derive(Default)]
pub struct BatchKept {
    rows: Rows,
    /// Items of the batch's feeds as the transaction has them (`None`: known absent), by feed
    /// id and item id.
    items: HashMap<(i64, String), Option<Item>>,
    /// Per feed id, its newest modification time and the (mseq, id) of every item at it, in
    /// mseq order.
    ties: HashMap<i64, (i64, Vec<(i64, String)>)>,
}

/// What a closure's failure gives back: small (a batch names few feeds), so copied before
/// each closure.
#[derive(Clone, Default)]
pub struct Rows {
    /// The rows of the feeds the batch has read or locked, as it has them, by name.
    feeds: HashMap<String, FeedRow>,
    /// The views that follow each feed, by feed id, as read since the batch last changed
    /// subscriptions.
    followed: HashMap<i64, Followed>,
    /// What is owed to each feed's row and counts, by feed id.
    owed: HashMap<i64, Owed>,
}

/// What a store owes a feed's row and its counts, not written yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owed {
    /// The row as last saved, to be written.
    pub saved: Option<FeedRow>,
    /// Item rows added (`feeds.n_items`).
    pub items: i64,
    /// Changes to the modified counts, by (level, bucket).
    pub modified: BTreeMap<(i64, i64), i64>,
}

/// [`BatchKept`] as the closures of a batch share it.
pub type Kept = RefCell<BatchKept>;

impl BatchKept {
    pub fn feed(&self, name: &str) -> Option<FeedRow> {
        self.rows.feeds.get(name).cloned()
    }

    /// The kept row of the feed whose id is `id`.
    pub fn feed_by_id(&self, id: i64) -> Option<&FeedRow> {
        self.rows.feeds.values().find(|f| f.id == id)
    }

    pub fn keep_feed(&mut self, row: &FeedRow) {
        self.rows.feeds.insert(row.name.clone(), row.clone());
    }

    pub fn followed(&self, feed: i64) -> Option<Followed> {
        self.rows.followed.get(&feed).cloned()
    }

    pub fn keep_followed(&mut self, feed: i64, views: &Followed) {
        self.rows.followed.insert(feed, views.clone());
    }

    /// A closure changed subscriptions: the views kept are stale.
    pub fn subscriptions_changed(&mut self) {
        self.rows.followed.clear();
    }

    /// The item `id` of `feed` as the batch knows it: `Some(None)` when known absent, `None`
    /// when the batch does not know.
    pub fn item(&self, feed: i64, id: &str) -> Option<Option<Item>> {
        self.items.get(&(feed, id.to_string())).cloned()
    }

    /// The batch read `id` of `feed` (`None`: absent).
    pub fn keep_item(&mut self, feed: i64, id: &str, item: Option<Item>) {
        self.items.insert((feed, id.to_string()), item);
    }

    /// The batch wrote `item` to `feed`: it is the item's version now, and it is the newest
    /// of the feed's modification order. `newest_before` is the feed's newest modification
    /// time before it, from the feed's row.
    pub fn wrote_item(&mut self, feed: i64, item: &Item, newest_before: Option<i64>) {
        self.items.insert((feed, item.id.clone()), Some(item.clone()));
        let (t, seq) = (item.modified.t, item.modified.seq);
        let at_t = (seq, item.id.clone());
        match self.ties.get_mut(&feed) {
            // A full list stays as it is: what lies past it is asked of the database.
            Some((kept_t, ids)) if *kept_t == t => {
                if ids.len() < MAX_KEPT_TIES {
                    ids.push(at_t);
                }
            }
            _ if newest_before.is_some_and(|before| t > before) => {
                self.ties.insert(feed, (t, vec![at_t]));
            }
            _ => {
                self.ties.remove(&feed);
            }
        }
    }

    /// The ids at `t` in `feed`'s unfiltered modification order up to mseq `upto_seq`, at
    /// most `limit`, when the batch knows them all.
    pub fn ties(&self, feed: i64, t: i64, upto_seq: i64, limit: usize) -> Option<Vec<String>> {
        let (kept_t, ids) = self.ties.get(&feed)?;
        if *kept_t != t {
            return None;
        }
        let upto: Vec<String> = ids.iter().take_while(|(seq, _)| *seq <= upto_seq).map(|(_, id)| id.clone()).collect();
        // A full list may stop short of `upto_seq`: then the rest is not known.
        if upto.len() == ids.len() && ids.len() >= MAX_KEPT_TIES && upto.len() < limit {
            return None;
        }
        Some(upto.into_iter().take(limit).collect())
    }

    /// What is owed to `feed`'s row and counts, to add to.
    pub fn owe(&mut self, feed: i64) -> &mut Owed {
        self.rows.owed.entry(feed).or_default()
    }

    /// Everything owed, by feed id, taken: the store writes it now.
    pub fn take_owed(&mut self) -> Vec<(i64, Owed)> {
        self.rows.owed.drain().collect()
    }

    /// What a closure's failure gives back ([`restore`](Self::restore)), taken before it runs.
    pub fn checkpoint(&self) -> Rows {
        self.rows.clone()
    }

    /// A closure failed: the feeds' rows and views as they were before it, and nothing known
    /// of items (it may have read or written some).
    pub fn restore(&mut self, rows: Rows) {
        self.rows = rows;
        self.items.clear();
        self.ties.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use feed::{Key, Payload};

    fn item(id: &str, t: i64, seq: i64) -> Item {
        let key = Key { t, seq };
        Item {
            id: id.into(),
            created: key,
            modified: key,
            author: None,
            categories: Vec::new(),
            atom_id: None,
            payload: Payload::Entry("<entry/>".into()),
        }
    }

    #[test]
    fn ties_are_known_from_a_time_past_the_newest_and_follow_the_writes_at_it() {
        let mut kept = BatchKept::default();
        kept.wrote_item(1, &item("a", 10, 1), Some(10));
        assert_eq!(kept.ties(1, 10, 1, 9), None, "other items may be at the feed's newest time");
        kept.wrote_item(1, &item("b", 11, 2), Some(10));
        kept.wrote_item(1, &item("c", 11, 3), Some(11));
        assert_eq!(kept.ties(1, 11, 3, 9), Some(vec!["b".to_string(), "c".to_string()]));
        assert_eq!(kept.ties(1, 11, 2, 9), Some(vec!["b".to_string()]));
        assert_eq!(kept.ties(1, 11, 3, 1), Some(vec!["b".to_string()]));
        assert_eq!(kept.ties(2, 11, 3, 9), None, "another feed");
        kept.wrote_item(1, &item("d", 12, 4), Some(11));
        assert_eq!(kept.ties(1, 11, 3, 9), None, "only the newest time is kept");
        assert_eq!(kept.ties(1, 12, 4, 9), Some(vec!["d".to_string()]));
    }

    #[test]
    fn a_full_list_of_ties_is_not_taken_for_more() {
        let mut kept = BatchKept::default();
        for seq in 1..=MAX_KEPT_TIES as i64 + 1 {
            kept.wrote_item(1, &item(&format!("i{seq}"), 10, seq), Some(if seq == 1 { 9 } else { 10 }));
        }
        assert_eq!(kept.ties(1, 10, 5, 3).map(|ids| ids.len()), Some(3));
        assert_eq!(kept.ties(1, 10, MAX_KEPT_TIES as i64 + 1, usize::MAX), None);
    }

    #[test]
    fn a_failed_closure_gives_back_the_rows_and_forgets_the_items() {
        let mut kept = BatchKept::default();
        let row = FeedRow { id: 1, name: "f".into(), items: 1, last_t: 10, last_mseq: 1 };
        kept.keep_feed(&row);
        let before = kept.checkpoint();
        kept.keep_feed(&FeedRow { items: 2, ..row.clone() });
        kept.wrote_item(1, &item("a", 11, 2), Some(10));
        kept.keep_item(1, "b", None);
        kept.restore(before);
        assert_eq!(kept.feed("f"), Some(row));
        assert_eq!((kept.item(1, "a"), kept.item(1, "b"), kept.ties(1, 11, 2, 9)), (None, None, None));
    }
}
