//! An item as readers get it, made once per item version.
//!
//! A page of fifty items used to parse fifty stored Atom entries (for the JSON `title`,
//! `content` and `author`) on every read. Here every form a reader takes of an item (its
//! JSON object, its Atom entry with `fo:id` and `fo:cursor`, its JSON Feed item) is made
//! once per item version and kept by the version ([`feed::caches::ByVersion`], which the XMPP
//! face keeps its `<item/>`s in too): the feed and the item's modified seq, which every
//! publish, update and retraction stamps anew, so a version's forms never change and the
//! cache needs no invalidation. A page is then a store read and the concatenation of ready
//! text.
//!
//! The only part of a form that depends on the view is the item's cursor in it, so each
//! form is kept as a [`Template`]: its text with the place where the cursor goes.

#[cfg(test)]
use crate::formats::{entry_atom, item_json};
use crate::formats::{entry_atom_of, item_json_of, parsed, to_json};
use feed::Item;
use feed::caches::{ByVersion, Weighed};
use std::sync::Arc;

/// What the cache may hold, bytes of text.
const CACHE_BYTES: u64 = 64 << 20;

/// A form of an item with its cursor left out: `text[..at]`, the cursor, `text[at..]`.
#[derive(Debug)]
pub struct Template {
    text: String,
    /// `None`: the form has no place for a cursor (an entry the Atom form could not add its
    /// `fo:` elements to is spliced in as it is).
    at: Option<usize>,
}

impl Template {
    /// The form made with an empty cursor, and `before`, the text that ends just before the
    /// cursor's place (the last of its kind in `text`).
    fn cut(text: String, before: &str) -> Template {
        let at = text.rfind(before).map(|i| i + before.len());
        Template { text, at }
    }

    /// Appends the form with `cursor` in its place.
    pub fn write(&self, out: &mut String, cursor: &str) {
        match self.at {
            Some(at) => {
                out.push_str(&self.text[..at]);
                out.push_str(cursor);
                out.push_str(&self.text[at..]);
            }
            None => out.push_str(&self.text),
        }
    }

    /// The form with `cursor` in its place.
    pub fn with(&self, cursor: &str) -> String {
        let mut s = String::with_capacity(self.text.len() + cursor.len());
        self.write(&mut s, cursor);
        s
    }

    fn len(&self) -> usize {
        self.text.len()
    }
}

/// Every form of one item version.
#[derive(Debug)]
pub struct Rendered {
    /// When the version was made, Unix ms (an Atom document's `updated`).
    pub modified: i64,
    /// A retraction's tombstone.
    pub deleted: bool,
    /// The JSON object of SPEC §9.
    pub json: Template,
    /// The Atom entry (or `at:deleted-entry`) as a child of a feed document.
    pub atom: Template,
    /// The JSON Feed item ([`crate::json_feed`]).
    pub json_feed: Template,
}

impl Rendered {
    /// Makes every form of `item` (this is where stored entries are parsed, once).
    pub fn of(item: &Item) -> Rendered {
        // Each form is made with an empty cursor; the cursor's place is right after the
        // last `"cursor":"` (JSON) or `<fo:cursor>` (Atom) of the text. The entry is parsed
        // once for all of them.
        let entry = parsed(item);
        Rendered {
            modified: item.modified.t,
            deleted: item.is_deleted(),
            json: Template::cut(to_json(&item_json_of(item, entry.as_ref(), "")), r#""cursor":""#),
            atom: Template::cut(entry_atom_of(item, entry.as_ref(), ""), "<fo:cursor>"),
            json_feed: Template::cut(to_json(&crate::json_feed::item_of(item, entry.as_ref(), "")), r#""cursor":""#),
        }
    }

    /// The item as one Server-Sent Event (SPEC §9): `id`, `event` and its JSON object.
    pub fn event(&self, cursor: &str, out: &mut String) {
        out.push_str("id: cursor:");
        out.push_str(cursor);
        out.push_str(if self.deleted { "\nevent: retract\ndata: " } else { "\nevent: item\ndata: " });
        // JSON text holds no raw line break, so the object is one `data:` line.
        self.json.write(out, cursor);
        out.push_str("\n\n");
    }
}

impl Weighed for Rendered {
    /// The text held, bytes.
    fn weight(&self) -> u32 {
        u32::try_from(self.json.len() + self.atom.len() + self.json_feed.len() + 64).unwrap_or(u32::MAX)
    }
}

/// The forms of recent item versions, by feed and modified seq.
pub struct Renders(ByVersion<Rendered>);

impl Default for Renders {
    fn default() -> Self {
        Renders(ByVersion::new(CACHE_BYTES))
    }
}

impl Renders {
    /// The forms of `item`, a version of an item of `feed` as the store keeps it.
    pub fn of(&self, feed: &str, item: &Item) -> Arc<Rendered> {
        self.0.of(feed, item, Rendered::of)
    }

    /// The forms of each of `items`.
    pub fn all(&self, feed: &str, items: &[Item]) -> Vec<Arc<Rendered>> {
        items.iter().map(|i| self.of(feed, i)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::ATOM;
    use feed::{Key, Payload};

    #[test]
    fn each_form_takes_the_cursor_where_it_would_be_made_with_it() {
        let entry = format!(r#"<entry xmlns="{ATOM}"><title>T "cursor":"</title><content>C</content></entry>"#);
        let mut item = crate::test_item("a\"b", Payload::Entry(entry));
        item.modified = Key { t: 5, seq: 9 };
        let r = Rendered::of(&item);
        let c = "1_0_7";
        assert_eq!(r.json.with(c), to_json(&item_json(&item, c)));
        assert_eq!(r.atom.with(c), entry_atom(&item, c));
        assert_eq!(r.json_feed.with(c), to_json(&crate::json_feed::item(&item, c)));
        let gone = Item { payload: Payload::Tombstone { atom_ref: "urn:x".into(), when: 5 }, ..item.clone() };
        let g = Rendered::of(&gone);
        assert!(g.deleted);
        assert_eq!(g.atom.with(c), entry_atom(&gone, c));
        assert_eq!(g.json_feed.with(c), to_json(&crate::json_feed::item(&gone, c)));
        let mut event = String::new();
        g.event(c, &mut event);
        assert_eq!(event, format!("id: cursor:{c}\nevent: retract\ndata: {}\n\n", to_json(&item_json(&gone, c))));
    }

    #[test]
    fn a_version_is_made_once() {
        let renders = Renders::default();
        let item = crate::test_item("x", Payload::Entry(format!(r#"<entry xmlns="{ATOM}"/>"#)));
        assert!(Arc::ptr_eq(&renders.of("f", &item), &renders.of("f", &item)));
        assert!(!Arc::ptr_eq(&renders.of("f", &item), &renders.of("g", &item)), "another feed's item");
    }
}
