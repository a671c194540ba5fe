//! Node names and the views they name.
//!
//! A node name is `FEED` or `FEED?QUERY`, where QUERY is `key=value` pairs joined by `&`,
//! percent-encoded as in a URL query. The same feed is exposed as many views; two names that
//! differ only in parameter order are the same view, so every view has one canonical name.

use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};
use std::fmt;

/// Which of the item's two times orders a view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OrderBy {
    /// Insertion order: new items only move the end of the view.
    Created,
    /// Modification order: updates and retractions move an item to the end.
    Modified,
}

/// The order of a view: a time and a direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Order {
    pub by: OrderBy,
    /// `-created` / `-modified`: newest first.
    pub descending: bool,
}

/// A feed's order when the configuration names none: newest first.
impl Default for Order {
    fn default() -> Self {
        Order::NEWEST_FIRST
    }
}

impl Order {
    pub const CREATED: Order = Order { by: OrderBy::Created, descending: false };
    pub const NEWEST_FIRST: Order = Order { by: OrderBy::Created, descending: true };

    /// Parses `created`, `-created`, `modified` or `-modified`.
    pub fn parse(s: &str) -> Option<Order> {
        let (descending, by) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let by = match by {
            "created" => OrderBy::Created,
            "modified" => OrderBy::Modified,
            _ => return None,
        };
        Some(Order { by, descending })
    }
}

impl fmt::Display for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.descending { "-" } else { "" };
        let by = match self.by {
            OrderBy::Created => "created",
            OrderBy::Modified => "modified",
        };
        write!(f, "{sign}{by}")
    }
}

/// Which items of a feed a view shows. Filters apply to tombstones too (they keep the
/// author and categories of the entry they replaced), so a filtered view sees retractions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Filter {
    /// Only items whose `atom:author/atom:name` equals this.
    pub author: Option<String>,
    /// Only items with an `atom:category` whose `term` equals this.
    pub category: Option<String>,
}

impl Filter {
    pub fn is_empty(&self) -> bool {
        self.author.is_none() && self.category.is_none()
    }

    /// Whether an item with this author and these categories belongs to the view.
    pub fn matches(&self, author: Option<&str>, categories: &[String]) -> bool {
        self.author.as_deref().is_none_or(|a| author == Some(a))
            && self.category.as_deref().is_none_or(|c| categories.iter().any(|t| t == c))
    }
}

/// A parsed node name, before the feed's default order is applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeName {
    pub feed: String,
    pub order: Option<Order>,
    pub filter: Filter,
}

/// A resolved view: a feed, an order and a filter.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct View {
    pub feed: String,
    pub order: Order,
    pub filter: Filter,
}

/// Why a node name names no view. Each variant names what was wrong, for the `<text/>`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    #[error("empty node name")]
    Empty,
    #[error("feed name {0:?} is not valid")]
    BadFeed(String),
    #[error("unknown parameter {0:?}")]
    Unknown(String),
    #[error("parameter {0:?} is given more than once")]
    Repeated(String),
    #[error("parameter {0:?} has a bad value")]
    BadValue(String),
}

/// Longest feed name we accept; node names are attributes and should stay small.
pub const MAX_FEED_NAME: usize = 256;

/// What must be percent-encoded in a canonical parameter value.
const VALUE_SET: &AsciiSet =
    &CONTROLS.add(b' ').add(b'%').add(b'&').add(b'=').add(b'+').add(b'#').add(b'?').add(b'"').add(b'<').add(b'>');

fn decode(raw: &str, what: &str) -> Result<String, NodeError> {
    let plus_as_space = raw.replace('+', " ");
    percent_decode_str(&plus_as_space)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| NodeError::BadValue(what.to_string()))
}

/// Whether `name` can be a feed name: non-empty, short, no query or control characters.
pub fn valid_feed_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_FEED_NAME
        && !name.chars().any(|c| c.is_control() || matches!(c, '?' | '&' | '=' | '#' | '%'))
}

impl NodeName {
    /// Parses `FEED` or `FEED?key=value&…`.
    pub fn parse(node: &str) -> Result<NodeName, NodeError> {
        if node.is_empty() {
            return Err(NodeError::Empty);
        }
        let (feed, query) = match node.split_once('?') {
            Some((f, q)) => (f, Some(q)),
            None => (node, None),
        };
        if !valid_feed_name(feed) {
            return Err(NodeError::BadFeed(feed.chars().take(64).collect()));
        }
        let mut name = NodeName { feed: feed.to_string(), order: None, filter: Filter::default() };
        let Some(query) = query else { return Ok(name) };
        for pair in query.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode(key, key)?;
            let value = decode(value, &key)?;
            let slot_taken = match key.as_str() {
                "order" => {
                    let order = Order::parse(&value).ok_or(NodeError::BadValue(key.clone()))?;
                    name.order.replace(order).is_some()
                }
                "author" | "category" => {
                    if value.is_empty() {
                        return Err(NodeError::BadValue(key));
                    }
                    let slot = if key == "author" { &mut name.filter.author } else { &mut name.filter.category };
                    slot.replace(value).is_some()
                }
                _ => return Err(NodeError::Unknown(key.chars().take(64).collect())),
            };
            if slot_taken {
                return Err(NodeError::Repeated(key));
            }
        }
        Ok(name)
    }

    /// Applies the feed's default order where the name gives none.
    pub fn resolve(self, default: Order) -> View {
        View { feed: self.feed, order: self.order.unwrap_or(default), filter: self.filter }
    }
}

impl View {
    /// The one name of this view: `FEED?order=…` then `author`, then `category`.
    pub fn canonical(&self) -> String {
        let mut s = format!("{}?order={}", self.feed, self.order);
        if let Some(a) = &self.filter.author {
            s.push_str("&author=");
            s.extend(utf8_percent_encode(a, VALUE_SET));
        }
        if let Some(c) = &self.filter.category {
            s.push_str("&category=");
            s.extend(utf8_percent_encode(c, VALUE_SET));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_feed_has_no_parameters() {
        let n = NodeName::parse("comments").unwrap();
        assert_eq!(n, NodeName { feed: "comments".into(), order: None, filter: Filter::default() });
        assert_eq!(n.resolve(Order::NEWEST_FIRST).canonical(), "comments?order=-created");
    }

    #[test]
    fn parameters_are_decoded_and_order_does_not_matter() {
        let a = NodeName::parse("c?author=J%C3%BCrgen+M&order=-modified&category=a%26b").unwrap();
        let b = NodeName::parse("c?category=a%26b&order=-modified&author=J%C3%BCrgen%20M").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.filter.author.as_deref(), Some("Jürgen M"));
        assert_eq!(a.filter.category.as_deref(), Some("a&b"));
        let v = a.resolve(Order::CREATED);
        assert_eq!(v.canonical(), "c?order=-modified&author=J%C3%BCrgen%20M&category=a%26b");
        // The canonical name parses back to the same view.
        assert_eq!(NodeName::parse(&v.canonical()).unwrap().resolve(Order::CREATED), v);
    }

    #[test]
    fn errors_name_the_parameter() {
        assert_eq!(NodeName::parse("c?sort=x"), Err(NodeError::Unknown("sort".into())));
        assert_eq!(NodeName::parse("c?order=created&order=modified"), Err(NodeError::Repeated("order".into())));
        assert_eq!(NodeName::parse("c?order=sideways"), Err(NodeError::BadValue("order".into())));
        assert_eq!(NodeName::parse("c?author="), Err(NodeError::BadValue("author".into())));
        assert_eq!(NodeName::parse("c?author=%FF"), Err(NodeError::BadValue("author".into())));
        assert_eq!(NodeName::parse(""), Err(NodeError::Empty));
        assert!(matches!(NodeName::parse("?order=created"), Err(NodeError::BadFeed(_))));
        assert!(matches!(NodeName::parse(&"x".repeat(300)), Err(NodeError::BadFeed(_))));
    }

    #[test]
    fn every_order_parses_and_prints_back() {
        for s in ["created", "-created", "modified", "-modified"] {
            assert_eq!(Order::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(Order::parse("--created"), None);
    }

    #[test]
    fn filters_match_author_and_category() {
        let f = Filter { author: Some("ann".into()), category: Some("x".into()) };
        assert!(f.matches(Some("ann"), &["y".into(), "x".into()]));
        assert!(!f.matches(Some("bob"), &["x".into()]));
        assert!(!f.matches(Some("ann"), &[]));
        assert!(Filter::default().matches(None, &[]));
    }
}
