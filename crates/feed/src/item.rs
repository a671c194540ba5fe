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

/// When an item says it was published and last updated, Unix ms: what readers are shown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dates {
    pub published: i64,
    pub updated: i64,
}

impl Item {
    /// The dates readers are shown, one rule for every face: the entry's own `<published>`
    /// and `<updated>`; an entry with only one of them has it for both; one with neither
    /// (and a tombstone) has the item's times in the feed, when it entered (created) and
    /// when it last changed (modified). The cursor keeps the item's own times whatever the
    /// entry says. `entry` is the item's entry, parsed (the faces read it anyway).
    pub fn dates(&self, entry: Option<&minidom::Element>) -> Dates {
        let (published, updated) = entry.map_or((None, None), crate::atom::entry_times);
        Dates {
            published: published.or(updated).unwrap_or(self.created.t),
            updated: updated.or(published).unwrap_or(self.modified.t),
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    fn item(created: i64, modified: i64) -> Item {
        let payload = Payload::Entry(String::new());
        let key = |t| Key { t, seq: 1 };
        Item { created: key(created), modified: key(modified), ..Item::bare("i".into(), modified, payload) }
    }

    fn entry(inner: &str) -> minidom::Element {
        format!("<entry xmlns='http://www.w3.org/2005/Atom'><id>x</id>{inner}</entry>").parse().unwrap()
    }

    #[test]
    fn readers_get_the_entrys_own_dates_and_the_feeds_where_it_has_none() {
        let (created, modified) = (1_800_000_000_000, 1_800_000_500_000);
        let it = item(created, modified);
        let nov2 = 1_762_041_600_000; // 2025-11-02T00:00:00Z
        let both = entry("<published>2025-11-02T00:00:00Z</published><updated>2025-11-02T01:00:00+01:00</updated>");
        assert_eq!(it.dates(Some(&both)), Dates { published: nov2, updated: nov2 });
        let updated_only = entry("<updated>2025-11-02T00:00:00Z</updated>");
        assert_eq!(it.dates(Some(&updated_only)), Dates { published: nov2, updated: nov2 });
        let published_only = entry("<published>2025-11-02T00:00:00Z</published>");
        assert_eq!(it.dates(Some(&published_only)), Dates { published: nov2, updated: nov2 });
        let neither = entry("<updated>the day before yesterday</updated>");
        assert_eq!(it.dates(Some(&neither)), Dates { published: created, updated: modified });
        assert_eq!(it.dates(None), Dates { published: created, updated: modified }, "a tombstone");
    }
}
