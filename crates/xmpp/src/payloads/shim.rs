//! XEP-0131 Stanza Headers and Internet Metadata (SHIM), which xmpp-parsers 0.23 lacks:
//! `<headers xmlns="http://jabber.org/protocol/shim"><header name="…">value</header></headers>`.
//!
//! Pushes carry the sync headers of SPEC §5 ([`SyncHeaders`]): `TotalItems`, `PreviousCursor`
//! (omitted when the view was empty before the change) and `LastCursor`.

use minidom::Element;
use xmpp_parsers::message::MessagePayload;
use xso::{AsXml, FromXml};

use super::SHIM;

/// The `TotalItems` header: items in the subscriber's view after the change.
pub const TOTAL_ITEMS: &str = "TotalItems";

/// The `PreviousCursor` header: cursor value of the view's last item before the change.
pub const PREVIOUS_CURSOR: &str = "PreviousCursor";

/// The `LastCursor` header: cursor value of the pushed item.
pub const LAST_CURSOR: &str = "LastCursor";

/// The disco#info features of the `http://jabber.org/protocol/shim` node (XEP-0131 §3.2),
/// one per header we send.
pub const HEADER_FEATURES: [&str; 3] = [
    "http://jabber.org/protocol/shim#TotalItems",
    "http://jabber.org/protocol/shim#PreviousCursor",
    "http://jabber.org/protocol/shim#LastCursor",
];

/// `<headers xmlns="http://jabber.org/protocol/shim">`: a list of named headers, in order.
#[derive(FromXml, AsXml, Debug, Clone, PartialEq, Default)]
#[xml(namespace = SHIM, name = "headers")]
pub struct Headers {
    /// The headers, in document order; a name may repeat (XEP-0131 allows it).
    #[xml(child(n = ..))]
    pub headers: Vec<Header>,
}

impl MessagePayload for Headers {}

impl Headers {
    /// No headers.
    pub fn new() -> Headers {
        Headers::default()
    }

    /// These headers and one more at the end.
    pub fn with(mut self, name: impl Into<String>, value: impl Into<String>) -> Headers {
        self.headers.push(Header { name: name.into(), value: value.into() });
        self
    }

    /// The value of the first header called `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|h| h.name == name).map(|h| h.value.as_str())
    }
}

/// `<header name="…">value</header>`.
#[derive(FromXml, AsXml, Debug, Clone, PartialEq)]
#[xml(namespace = SHIM, name = "header")]
pub struct Header {
    /// The header name, e.g. `TotalItems`.
    #[xml(attribute)]
    pub name: String,

    /// The header value, as text.
    #[xml(text)]
    pub value: String,
}

/// The sync headers of a push (SPEC §5), typed. Convert into [`Headers`] to send; parse from
/// `&Headers` (in a test client) to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncHeaders {
    /// `TotalItems`.
    pub total_items: u64,
    /// `PreviousCursor`, without the `cursor:` prefix; `None` when the view was empty.
    pub previous_cursor: Option<String>,
    /// `LastCursor`, without the `cursor:` prefix.
    pub last_cursor: String,
}

impl SyncHeaders {
    /// The headers of a push of a change to `view`.
    pub fn of(view: &feed::ViewChange) -> SyncHeaders {
        SyncHeaders {
            total_items: view.count,
            previous_cursor: view.previous.map(|c| c.to_string()),
            last_cursor: view.last.to_string(),
        }
    }
}

impl From<SyncHeaders> for Headers {
    fn from(s: SyncHeaders) -> Headers {
        let mut headers = Headers::new().with(TOTAL_ITEMS, s.total_items.to_string());
        if let Some(previous) = s.previous_cursor {
            headers = headers.with(PREVIOUS_CURSOR, previous);
        }
        headers.with(LAST_CURSOR, s.last_cursor)
    }
}

impl From<SyncHeaders> for Element {
    fn from(s: SyncHeaders) -> Element {
        Headers::from(s).into()
    }
}

impl TryFrom<&Headers> for SyncHeaders {
    type Error = &'static str;

    fn try_from(h: &Headers) -> Result<SyncHeaders, &'static str> {
        Ok(SyncHeaders {
            total_items: h
                .get(TOTAL_ITEMS)
                .ok_or("no TotalItems header")?
                .parse()
                .map_err(|_| "TotalItems is not a non-negative integer")?,
            previous_cursor: h.get(PREVIOUS_CURSOR).map(str::to_owned),
            last_cursor: h.get(LAST_CURSOR).ok_or("no LastCursor header")?.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_serialise() {
        let elem: Element = "<headers xmlns='http://jabber.org/protocol/shim'>\
            <header name='TotalItems'>427</header>\
            <header name='PreviousCursor'>1700000000000_0_3678689003</header>\
            <header name='LastCursor'>1700000000123_0_2040335985</header></headers>"
            .parse()
            .unwrap();
        let headers = Headers::try_from(elem.clone()).unwrap();
        assert_eq!(headers.headers.len(), 3);
        assert_eq!(headers.headers[0].name, "TotalItems");
        assert_eq!(headers.headers[0].value, "427");
        assert_eq!(headers.get(LAST_CURSOR), Some("1700000000123_0_2040335985"));
        assert_eq!(headers.get("Nope"), None);

        let sync = SyncHeaders::try_from(&headers).unwrap();
        assert_eq!(
            sync,
            SyncHeaders {
                total_items: 427,
                previous_cursor: Some("1700000000000_0_3678689003".into()),
                last_cursor: "1700000000123_0_2040335985".into(),
            }
        );
        assert_eq!(Headers::from(sync.clone()), headers);
        assert_eq!(Element::from(sync), elem);
    }

    #[test]
    fn first_push_has_no_previous_cursor() {
        let elem: Element = "<headers xmlns='http://jabber.org/protocol/shim'>\
            <header name='TotalItems'>1</header><header name='LastCursor'>5_0_7</header></headers>"
            .parse()
            .unwrap();
        let sync = SyncHeaders { total_items: 1, previous_cursor: None, last_cursor: "5_0_7".into() };
        assert_eq!(Element::from(sync.clone()), elem);
        let parsed = Headers::try_from(elem).unwrap();
        assert_eq!(SyncHeaders::try_from(&parsed).unwrap(), sync);
    }

    #[test]
    fn empty_and_bad_headers() {
        let elem: Element =
            "<headers xmlns='http://jabber.org/protocol/shim'><header name='TotalItems'/></headers>".parse().unwrap();
        let headers = Headers::try_from(elem).unwrap();
        assert_eq!(headers.get(TOTAL_ITEMS), Some(""));
        assert!(SyncHeaders::try_from(&headers).is_err());
        let elem: Element =
            "<headers xmlns='http://jabber.org/protocol/shim'><header>x</header></headers>".parse().unwrap();
        assert!(Headers::try_from(elem).is_err());
    }
}
