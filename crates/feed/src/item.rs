//! Items as the core sees them: ids, the two ordering keys, and a payload that is either an
//! Atom entry (kept as XML text, which the core never parses) or an RFC 6721 tombstone.

use super::node::OrderBy;

/// A place in one of a feed's two orders. `t` is Unix milliseconds, monotonic per feed;
/// `seq` is a per-feed sequence that breaks ties (insertion order for `created`,
/// modification order for `modified`). Keys compare as `(t, seq)`, and because `t` never
/// goes back within a feed, that is also `seq` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub t: i64,
    pub seq: i64,
}

impl Key {
    /// The smallest key at time `t`: everything at `t` is after it.
    pub fn start_of(t: i64) -> Key {
        Key { t, seq: i64::MIN }
    }
    /// The largest key at time `t`: everything at `t` is before it.
    pub fn end_of(t: i64) -> Key {
        Key { t, seq: i64::MAX }
    }
}

/// What an item holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// One `<entry xmlns="http://www.w3.org/2005/Atom">`, serialised.
    Entry(String),
    /// A retracted item: `<deleted-entry ref="…" when="…"/>`.
    Tombstone {
        /// The retracted entry's `atom:id`, or the item id when it had none.
        atom_ref: String,
        /// When it was retracted, Unix milliseconds.
        when: i64,
    },
}

/// A stored item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub id: String,
    pub created: Key,
    pub modified: Key,
    /// `atom:author/atom:name`; kept for tombstones so filtered views still see them.
    pub author: Option<String>,
    /// `atom:category/@term`s; kept for tombstones like `author`.
    pub categories: Vec<String>,
    /// The entry's `atom:id`, for the tombstone's `ref`.
    pub atom_id: Option<String>,
    pub payload: Payload,
}

impl Item {
    /// An item as a push or a WebSub delivery carries it: its id, its modification time and
    /// its payload (the rest is only what views and filters need, and has been used).
    pub fn bare(id: String, modified: i64, payload: Payload) -> Item {
        let key = Key { t: modified, seq: 0 };
        Item { id, created: key, modified: key, author: None, categories: Vec::new(), atom_id: None, payload }
    }

    pub fn key(&self, by: OrderBy) -> Key {
        match by {
            OrderBy::Created => self.created,
            OrderBy::Modified => self.modified,
        }
    }

    pub fn is_deleted(&self) -> bool {
        matches!(self.payload, Payload::Tombstone { .. })
    }
}

/// An Atom entry a publisher sent, with what the core needs to know of it. The XMPP glue
/// checks that it is exactly one Atom entry and extracts these fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The entry serialised as XML.
    pub xml: String,
    pub atom_id: Option<String>,
    pub author: Option<String>,
    pub categories: Vec<String>,
}
