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

/// Text weighs its length.
impl Weighed for str {
    fn weight(&self) -> u32 {
        u32::try_from(self.len()).unwrap_or(u32::MAX)
    }
}

/// Values `V` made for keys `K` at a feed's change generation ([`crate::generations`]): an
/// answer or a page body is a function of what was asked (the key) and of the feed's items,
/// which change only with the generation. Kept in a cache bounded by size; a value is served
/// only at the generation it was made at, and one of an older generation never replaces a
/// newer one. Both faces keep their hot answers in one of these.
pub struct ByGeneration<K, V: ?Sized> {
    cache: moka::sync::Cache<K, (i64, Arc<V>)>,
    /// Values heavier than this are not kept.
    largest: u32,
}

impl<K, V> ByGeneration<K, V>
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
    V: Weighed + ?Sized + Send + Sync + 'static,
{
    /// A cache of at most `bytes` (each entry weighs its value, its key by `key_weight`, and
    /// 128 more), keeping values of at most `largest` bytes.
    pub fn new(bytes: u64, largest: u32, key_weight: fn(&K) -> u32) -> ByGeneration<K, V> {
        let cache = moka::sync::Cache::builder()
            .max_capacity(bytes)
            .weigher(move |k: &K, (_, v): &(i64, Arc<V>)| key_weight(k).saturating_add(v.weight()).saturating_add(128))
            .build();
        ByGeneration { cache, largest }
    }

    /// The value kept for `key`, if it was made at `generation`.
    pub fn get<Q>(&self, key: &Q, generation: i64) -> Option<Arc<V>>
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.cache.get(key).filter(|(g, _)| *g == generation).map(|(_, v)| v)
    }

    /// Keeps `value`, made for `key` at `generation` (unless it is too large, or a value of
    /// a later generation is kept already).
    pub fn keep(&self, key: K, generation: i64, value: Arc<V>) {
        if value.weight() > self.largest || self.cache.get(&key).is_some_and(|(g, _)| g > generation) {
            return;
        }
        self.cache.insert(key, (generation, value));
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

    #[test]
    fn a_value_serves_its_generation_only_and_a_newer_one_stays() {
        let kept = ByGeneration::<String, str>::new(1 << 20, 8, |k| k.len() as u32);
        kept.keep("k".into(), 3, Arc::from("three"));
        assert_eq!(kept.get("k", 3).as_deref(), Some("three"));
        assert_eq!(kept.get("k", 4), None, "a later generation reads again");
        assert_eq!(kept.get("other", 3), None);
        kept.keep("k".into(), 5, Arc::from("five"));
        kept.keep("k".into(), 4, Arc::from("four"));
        assert_eq!(kept.get("k", 5).as_deref(), Some("five"), "an older value does not replace a newer one");
        kept.keep("big".into(), 1, Arc::from("too large"));
        assert_eq!(kept.get("big", 1), None, "larger than the largest kept");
    }
}
