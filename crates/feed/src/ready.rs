//! What a face makes of an item version, made once.
//!
//! Every publish, update and retraction stamps the item with a new modified seq, so a
//! version of an item (its feed and that seq) never changes, and neither does anything made
//! from it: the HTTP face's forms (its JSON object, Atom entry, JSON Feed item), the XMPP
//! face's `<item/>` of a page. [`ByVersion`] keeps them in a cache bounded by size, keyed by
//! the version, which needs no invalidation: a page is a store read and the concatenation
//! of ready text. Each face keeps its own forms in one of these.

use crate::Item;
use std::sync::Arc;

/// What a made form weighs in its cache, bytes.
pub trait Weighed {
    fn weight(&self) -> u32;
}

/// Forms `T` of recent item versions, by feed and modified seq.
pub struct ByVersion<T> {
    cache: moka::sync::Cache<(String, i64), Arc<T>>,
}

impl<T: Weighed + Send + Sync + 'static> ByVersion<T> {
    /// A cache of at most `bytes` of forms.
    pub fn new(bytes: u64) -> ByVersion<T> {
        let cache = moka::sync::Cache::builder().max_capacity(bytes).weigher(|_, f: &Arc<T>| f.weight()).build();
        ByVersion { cache }
    }

    /// The form of `item`, a version of an item of `feed` as the store keeps it: made by
    /// `make` the first time it is asked for.
    pub fn of(&self, feed: &str, item: &Item, make: impl FnOnce(&Item) -> T) -> Arc<T> {
        self.cache.get_with((feed.to_string(), item.modified.seq), || Arc::new(make(item)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Key, Payload};

    struct Made(String);

    impl Weighed for Made {
        fn weight(&self) -> u32 {
            self.0.len() as u32
        }
    }

    #[test]
    fn a_version_is_made_once_per_feed() {
        let forms = ByVersion::<Made>::new(1 << 20);
        let mut item = Item::bare("x".into(), 1, Payload::Entry("<entry/>".into()));
        item.modified = Key { t: 1, seq: 7 };
        let first = forms.of("f", &item, |i| Made(i.id.clone()));
        assert!(Arc::ptr_eq(&first, &forms.of("f", &item, |_| unreachable!("made again"))));
        assert!(!Arc::ptr_eq(&first, &forms.of("g", &item, |i| Made(i.id.clone()))), "another feed's item");
        item.modified.seq = 8;
        assert_eq!(forms.of("f", &item, |_| Made("new".into())).0, "new", "a new version");
    }
}
