//! Change events: what a committed publish, update or retraction means for each subscribed
//! view, with everything a push needs (the SHIM headers' values).

use super::cursor::Cursor;
use super::item::Item;
use super::node::{OrderBy, View};

/// One committed change to one item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub feed: String,
    /// The item after the change (a tombstone for a retraction).
    pub item: Item,
    /// Whether the item is new (not an update or retraction).
    pub created: bool,
    /// Per subscribed view that the change belongs to.
    pub views: Vec<ViewChange>,
}

/// What one view saw of a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewChange {
    /// The canonical view name (subscriptions are matched on it).
    pub view: String,
    /// Items in the view after the change.
    pub count: u64,
    /// The cursor of the view's newest item before the change; `None` if it was empty.
    pub previous: Option<Cursor>,
    /// The cursor of the changed item in the view.
    pub last: Cursor,
}

/// Whether a change to `item` belongs to `view`: created-ordered views get new items only,
/// modified-ordered views get new items, updates and retractions; filters apply to the item
/// as it is after the change.
pub fn belongs(view: &View, item: &Item, created: bool) -> bool {
    (created || view.order.by == OrderBy::Modified) && view.filter.matches(item.author.as_deref(), &item.categories)
}

#[cfg(test)]
mod tests {
    //! `belongs` against a model written from SPEC §2 and §5, for arbitrary views and items:
    //! created-ordered views get new items only; modified-ordered views get new items,
    //! updates and retractions; `author` / `category` filters judge the item as it is after
    //! the change; the direction of the order does not matter; and membership survives the
    //! way subscriptions are stored (canonical view name, parsed back when a change commits).

    use super::*;
    use crate::item::{Key, Payload};
    use crate::node::{Filter, NodeName, Order};
    use proptest::prelude::*;

    /// Names that need care in a node name (percent-encoding, `+`, `&`, `=`, non-ASCII),
    /// drawn often so that filters and items meet.
    const NAMES: [&str; 8] = ["ann", "ben", "Zoë & Co", "a+b", "x=y", "100%", " sp ace", "a/b?c#d"];

    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => prop::sample::select(NAMES.to_vec()).prop_map(String::from),
            1 => any::<String>().prop_filter("filter values are non-empty", |s| !s.is_empty()),
        ]
    }

    fn order() -> impl Strategy<Value = Order> {
        (any::<bool>(), any::<bool>()).prop_map(|(modified, descending)| Order {
            by: if modified { OrderBy::Modified } else { OrderBy::Created },
            descending,
        })
    }

    fn view() -> impl Strategy<Value = View> {
        (order(), prop::option::of(name()), prop::option::of(name())).prop_map(|(order, author, category)| View {
            feed: "f".into(),
            order,
            filter: Filter { author, category },
        })
    }

    fn key() -> impl Strategy<Value = Key> {
        (0i64..1 << 45, 1i64..1 << 20).prop_map(|(t, seq)| Key { t, seq })
    }

    /// An item after a change: an entry, or a tombstone (which keeps author and categories).
    fn item() -> impl Strategy<Value = Item> {
        (prop::option::of(name()), prop::collection::vec(name(), 0..4), any::<bool>(), key(), key()).prop_map(
            |(author, categories, deleted, created, modified)| Item {
                id: "i".into(),
                created,
                modified: modified.max(created),
                author,
                categories,
                atom_id: Some("urn:i".into()),
                payload: if deleted {
                    Payload::Tombstone { atom_ref: "urn:i".into(), when: modified.t }
                } else {
                    Payload::Entry("<entry xmlns='http://www.w3.org/2005/Atom'/>".into())
                },
            },
        )
    }

    /// SPEC §2: `author=NAME` keeps items whose author name equals NAME; `category=TERM`
    /// keeps items with a category whose term equals TERM; both must hold.
    fn shown(view: &View, item: &Item) -> bool {
        let author_ok = match &view.filter.author {
            None => true,
            Some(a) => item.author.as_ref() == Some(a),
        };
        let category_ok = match &view.filter.category {
            None => true,
            Some(c) => item.categories.contains(c),
        };
        author_ok && category_ok
    }

    fn retracted(item: &Item) -> Item {
        Item { payload: Payload::Tombstone { atom_ref: "urn:i".into(), when: item.modified.t }, ..item.clone() }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn created_views_get_new_items_only(mut v in view(), i in item()) {
            v.order.by = OrderBy::Created;
            prop_assert_eq!(belongs(&v, &i, true), shown(&v, &i), "a new item, if the filters keep it");
            prop_assert!(!belongs(&v, &i, false), "never an update or a retraction");
            prop_assert!(!belongs(&v, &retracted(&i), false), "never a retraction");
        }

        #[test]
        fn modified_views_get_new_updated_and_retracted_items(mut v in view(), i in item()) {
            v.order.by = OrderBy::Modified;
            prop_assert_eq!(belongs(&v, &i, true), shown(&v, &i), "a new item");
            prop_assert_eq!(belongs(&v, &i, false), shown(&v, &i), "an update");
            prop_assert_eq!(belongs(&v, &retracted(&i), false), shown(&v, &i), "a retraction keeps the item's filters");
        }

        #[test]
        fn filters_judge_the_item_after_the_change(
            v in view(),
            before in item(),
            author in prop::option::of(name()),
            categories in prop::collection::vec(name(), 0..4),
        ) {
            // An update that may move the item into or out of the view: only the new
            // version counts (an item leaving a view is not pushed to it).
            let after = Item { author, categories, ..before.clone() };
            let expected = v.order.by == OrderBy::Modified && shown(&v, &after);
            prop_assert_eq!(belongs(&v, &after, false), expected, "before: {:?}", before);
        }

        #[test]
        fn an_unfiltered_view_takes_every_change_its_order_takes(o in order(), i in item(), created in any::<bool>()) {
            let v = View { feed: "f".into(), order: o, filter: Filter::default() };
            prop_assert_eq!(belongs(&v, &i, created), created || o.by == OrderBy::Modified);
        }

        #[test]
        fn the_direction_of_the_order_does_not_matter(v in view(), i in item(), created in any::<bool>()) {
            let mut flipped = v.clone();
            flipped.order.descending = !v.order.descending;
            prop_assert_eq!(belongs(&v, &i, created), belongs(&flipped, &i, created));
        }

        #[test]
        fn membership_survives_the_stored_subscription_name(
            v in view(),
            i in item(),
            created in any::<bool>(),
            default in order(),
        ) {
            // A subscription is stored under the view's canonical name; a commit parses it
            // back with the feed's default order. That must be the same view, so the same
            // changes reach it.
            let canonical = v.canonical();
            let back = NodeName::parse(&canonical).map(|n| n.resolve(default));
            prop_assert_eq!(back.as_ref(), Ok(&v), "{}", canonical);
            let back = back.unwrap_or_else(|_| v.clone());
            prop_assert_eq!(belongs(&back, &i, created), belongs(&v, &i, created));
        }
    }

    #[test]
    fn examples() {
        let entry = |author: Option<&str>, cats: &[&str]| Item {
            id: "x".into(),
            created: Key { t: 1, seq: 1 },
            modified: Key { t: 2, seq: 2 },
            author: author.map(String::from),
            categories: cats.iter().map(|c| c.to_string()).collect(),
            atom_id: None,
            payload: Payload::Entry(String::new()),
        };
        let view = |node: &str| NodeName::parse(node).unwrap().resolve(Order::NEWEST_FIRST);
        let ann = entry(Some("ann"), &["hot"]);
        // The feed's default (-created) view: new items only.
        assert!(belongs(&view("c"), &ann, true));
        assert!(!belongs(&view("c"), &ann, false));
        assert!(belongs(&view("c?order=-modified"), &ann, false));
        assert!(belongs(&view("c?order=modified&author=ann&category=hot"), &ann, false));
        assert!(!belongs(&view("c?order=modified&author=Ann"), &ann, false), "names match exactly");
        assert!(!belongs(&view("c?order=modified&category=cold"), &ann, true));
        assert!(!belongs(&view("c?order=modified&author=ann"), &entry(None, &["hot"]), false), "no author");
        // A retraction reaches the filtered modified view the entry was in.
        assert!(belongs(&view("c?order=modified&author=ann"), &retracted(&ann), false));
        // Percent-encoded filter values are compared decoded.
        let zoe = entry(Some("Zoë & Co"), &[]);
        assert!(belongs(&view("c?author=Zo%C3%AB%20%26%20Co&order=created"), &zoe, true));
        assert!(belongs(&view("c?author=Zo%C3%AB+%26+Co&order=modified"), &zoe, false));
    }
}
