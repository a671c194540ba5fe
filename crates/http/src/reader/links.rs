//! The page's own query (what the visitor chose) and the links it writes: back to itself
//! for other views and older items, and out to the view's feed URL in each format, the
//! WebSub hub and the XMPP node (XEP-0147).

use crate::resolve::SEGMENT;
use percent_encoding::utf8_percent_encode;

/// What the visitor chose, from the page's query string: a feed, the view's parameters as
/// given (checked when the view is resolved), and where in the view to read. Lenient, as a
/// form's answer is: an empty value is no value, the first of a repeated one counts, and
/// other parameters are ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Choice {
    pub feed: Option<String>,
    /// `created`, `-created`, `modified` or `-modified`; none: the feed's own order.
    pub order: Option<String>,
    pub author: Option<String>,
    pub category: Option<String>,
    /// Items older than this bare cursor (`T_O_C`); none: the newest items.
    pub before: Option<String>,
    /// One item only, as the list item the page shows for it (what the script fetches for
    /// a live item).
    pub item: Option<String>,
}

impl Choice {
    pub fn parse(query: Option<&str>) -> Choice {
        let mut c = Choice::default();
        for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            let v = v.trim();
            let slot = match k.as_ref() {
                "feed" => &mut c.feed,
                "order" => &mut c.order,
                "author" => &mut c.author,
                "category" => &mut c.category,
                "before" => &mut c.before,
                "item" => &mut c.item,
                _ => continue,
            };
            if slot.is_none() && !v.is_empty() {
                *slot = Some(v.to_string());
            }
        }
        c
    }

    /// The view parameters as a feed URL and a node name take them (`order=…`, `author=…`,
    /// `category=…`, values percent-encoded).
    pub fn view_params(&self) -> Vec<String> {
        [("order", &self.order), ("author", &self.author), ("category", &self.category)]
            .into_iter()
            .filter_map(|(k, v)| Some(format!("{k}={}", utf8_percent_encode(v.as_deref()?, SEGMENT))))
            .collect()
    }

    /// A link to the page (relative: `?feed=…`) for this choice in `feed`, changed by
    /// `change`. Where to read (`before`, `item`) is not carried over.
    pub fn href(&self, feed: &str, change: impl FnOnce(&mut Choice)) -> String {
        let mut c = Choice { feed: Some(feed.to_string()), before: None, item: None, ..self.clone() };
        change(&mut c);
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        let pairs = [
            ("feed", &c.feed),
            ("order", &c.order),
            ("author", &c.author),
            ("category", &c.category),
            ("before", &c.before),
            ("item", &c.item),
        ];
        for (k, v) in pairs {
            if let Some(v) = v {
                q.append_pair(k, v);
            }
        }
        format!("?{}", q.finish())
    }
}

/// `url` with one more query parameter (`key=value`, already encoded).
pub fn with_param(url: &str, param: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}")
}

/// The XEP-0147 URI that subscribes to `node` at the pubsub service `jid`:
/// `xmpp:JID?pubsub;action=subscribe;node=NODE`, the node percent-encoded as RFC 5122 wants
/// a query value (only unreserved characters stay as they are).
pub fn xmpp_subscribe(jid: &str, node: &str) -> String {
    format!(
        "xmpp:{}?pubsub;action=subscribe;node={}",
        utf8_percent_encode(jid, JID),
        utf8_percent_encode(node, SEGMENT)
    )
}

/// What a domain JID keeps unencoded in an `xmpp:` URI.
const JID: &percent_encoding::AsciiSet = &SEGMENT.remove(b'@').remove(b'/');

/// Where a view can be followed from outside the page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Follow {
    /// The view's feed URL (also the WebSub topic).
    pub url: String,
    /// The feed URL as Atom and as JSON Feed (`format=`, since a link cannot set `Accept`).
    pub atom: String,
    pub json_feed: String,
    pub hub: String,
    /// The pubsub service and the view's node name, and the XEP-0147 URI of both.
    pub jid: String,
    pub node: String,
    pub xmpp: String,
}

impl Follow {
    pub fn new(url: &str, hub: &str, jid: &str, node: &str) -> Follow {
        Follow {
            url: url.to_string(),
            atom: with_param(url, "format=atom"),
            json_feed: with_param(url, "format=json-feed"),
            hub: hub.to_string(),
            jid: jid.to_string(),
            node: node.to_string(),
            xmpp: xmpp_subscribe(jid, node),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_is_read_leniently() {
        let c = Choice::parse(Some("feed=comments&order=-modified&author=J%C3%BCrgen+M&category=&x=1&feed=other"));
        assert_eq!(c.feed.as_deref(), Some("comments"));
        assert_eq!(c.order.as_deref(), Some("-modified"));
        assert_eq!(c.author.as_deref(), Some("Jürgen M"));
        assert_eq!((c.category, c.before, c.item), (None, None, None));
        assert_eq!(Choice::parse(None), Choice::default());
    }

    #[test]
    fn view_parameters_are_encoded_as_a_node_name_takes_them() {
        let c = Choice {
            order: Some("modified".into()),
            author: Some("Jürgen M".into()),
            category: Some("a&b=c+d".into()),
            ..Choice::default()
        };
        let params = c.view_params();
        assert_eq!(params, ["order=modified", "author=J%C3%BCrgen%20M", "category=a%26b%3Dc%2Bd"]);
        let node = format!("f?{}", params.join("&"));
        let parsed = feed::NodeName::parse(&node).unwrap();
        assert_eq!(parsed.filter.author.as_deref(), Some("Jürgen M"));
        assert_eq!(parsed.filter.category.as_deref(), Some("a&b=c+d"));
        assert!(Choice::default().view_params().is_empty());
    }

    #[test]
    fn page_links_keep_the_view_and_change_one_thing() {
        let c = Choice {
            feed: Some("old".into()),
            order: Some("-created".into()),
            author: Some("ann".into()),
            before: Some("1_0_a".into()),
            item: Some("x".into()),
            ..Choice::default()
        };
        assert_eq!(c.href("f", |_| {}), "?feed=f&order=-created&author=ann");
        assert_eq!(c.href("f", |c| c.before = Some("9_1_b".into())), "?feed=f&order=-created&author=ann&before=9_1_b");
        assert_eq!(
            c.href("f f", |c| {
                c.author = None;
                c.category = Some("a&b".into());
            }),
            "?feed=f+f&order=-created&category=a%26b"
        );
        // A link parses back to what it was made from.
        let back = Choice::parse(c.href("f", |c| c.category = Some("x y".into())).strip_prefix('?'));
        assert_eq!(back.category.as_deref(), Some("x y"));
    }

    #[test]
    fn xmpp_uris_encode_the_node() {
        assert_eq!(
            xmpp_subscribe("feeds.example.com", "comments?order=modified"),
            "xmpp:feeds.example.com?pubsub;action=subscribe;node=comments%3Forder%3Dmodified"
        );
        assert_eq!(
            xmpp_subscribe("feeds.localhost", "c?order=-created&author=J%C3%BCrgen%20M"),
            "xmpp:feeds.localhost?pubsub;action=subscribe;node=c%3Forder%3D-created%26author%3DJ%25C3%25BCrgen%2520M"
        );
        assert_eq!(
            xmpp_subscribe("feeds.localhost", "plain"),
            "xmpp:feeds.localhost?pubsub;action=subscribe;node=plain"
        );
    }

    #[test]
    fn the_follow_links_of_a_view() {
        let f = Follow::new("http://h/feeds/c/?order=modified", "http://h/hub", "feeds.h", "c?order=modified");
        assert_eq!(f.atom, "http://h/feeds/c/?order=modified&format=atom");
        assert_eq!(f.json_feed, "http://h/feeds/c/?order=modified&format=json-feed");
        assert_eq!(with_param("http://h/feeds/c/", "format=atom"), "http://h/feeds/c/?format=atom");
        assert_eq!(f.xmpp, "xmpp:feeds.h?pubsub;action=subscribe;node=c%3Forder%3Dmodified");
    }
}
