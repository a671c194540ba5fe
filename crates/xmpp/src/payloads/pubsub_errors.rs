//! XEP-0060 application-specific error conditions, namespace
//! `http://jabber.org/protocol/pubsub#errors`.
//!
//! In xmpp-parsers 0.23 a [`StanzaError`] carries one application-specific element in its
//! public field `other: Option<Element>`, written after the defined condition and the
//! `<text/>`s. [`PubSubErrorCondition::attach`] puts one there; [`stanza_error`] builds the
//! whole error in one call.

use minidom::Element;
use xmpp_parsers::ns;
use xmpp_parsers::stanza_error::{DefinedCondition, ErrorType, StanzaError};
use xso::{AsXml, FromXml};

/// A pubsub#errors condition. Parsing an element of that namespace we do not list is a
/// mismatch (not an error), so a peer's other conditions pass through untouched.
#[derive(FromXml, AsXml, Debug, Clone, PartialEq, Eq)]
#[xml(namespace = ns::PUBSUB_ERRORS)]
pub enum PubSubErrorCondition {
    /// `<invalid-jid/>`: the subscribe `jid` is not the sender's bare JID (with `bad-request`).
    #[xml(name = "invalid-jid")]
    InvalidJid,

    /// `<not-subscribed/>`: unsubscribe without a subscription (with `unexpected-request`).
    #[xml(name = "not-subscribed")]
    NotSubscribed,

    /// `<closed-node/>`: a whitelist feed and a sender not on it (with `not-allowed`).
    #[xml(name = "closed-node")]
    ClosedNode,

    /// `<invalid-payload/>`: the item is not exactly one Atom entry (with `bad-request`).
    #[xml(name = "invalid-payload")]
    InvalidPayload,

    /// `<payload-too-big/>`: the item exceeds `max_payload_bytes` (with `not-acceptable`).
    #[xml(name = "payload-too-big")]
    PayloadTooBig,

    /// `<item-forbidden/>`: an item where none is allowed (with `bad-request`).
    #[xml(name = "item-forbidden")]
    ItemForbidden,

    /// `<nodeid-required/>`: a request without the node it needs (with `bad-request`).
    #[xml(name = "nodeid-required")]
    NodeIdRequired,

    /// `<item-required/>`: a publish or retract without an item (with `bad-request`).
    #[xml(name = "item-required")]
    ItemRequired,

    /// `<payload-required/>`: a publish item without a payload (with `bad-request`).
    #[xml(name = "payload-required")]
    PayloadRequired,

    /// `<unsupported feature="…"/>`: a pubsub feature we do not implement, e.g.
    /// `purge-nodes` or `delete-nodes` (with `feature-not-implemented`).
    #[xml(name = "unsupported")]
    Unsupported {
        /// The feature name, without the `http://jabber.org/protocol/pubsub#` prefix.
        #[xml(attribute)]
        feature: String,
    },
}

impl PubSubErrorCondition {
    /// `error` with this condition as its application-specific element (`other`).
    pub fn attach(self, mut error: StanzaError) -> StanzaError {
        error.other = Some(self.into());
        error
    }

    /// The condition `error` carries, if it carries one of ours.
    pub fn of(error: &StanzaError) -> Option<PubSubErrorCondition> {
        error.other.clone().and_then(|other: Element| PubSubErrorCondition::try_from(other).ok())
    }
}

/// A stanza error: `type_`, `condition`, an English `<text/>` when `text` is given, and the
/// pubsub#errors `app` condition when given.
pub fn stanza_error(
    type_: ErrorType,
    condition: DefinedCondition,
    text: Option<&str>,
    app: Option<PubSubErrorCondition>,
) -> StanzaError {
    let mut error = match text {
        Some(text) => StanzaError::new(type_, condition, "en", clipped(text)),
        None => StanzaError { type_, by: None, defined_condition: condition, texts: Default::default(), other: None },
    };
    error.other = app.map(Element::from);
    error
}

/// The longest `<text/>` sent: texts quote what the requester sent, and a 200 KB attribute
/// must not come back as a 200 KB error.
pub const MAX_ERROR_TEXT: usize = 300;

fn clipped(text: &str) -> String {
    match text.char_indices().nth(MAX_ERROR_TEXT) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jid::Jid;
    use xmpp_parsers::iq::Iq;

    #[test]
    fn long_texts_are_clipped_on_a_char_boundary() {
        let e = stanza_error(ErrorType::Modify, DefinedCondition::BadRequest, Some(&"é".repeat(5000)), None);
        let text = &e.texts["en"];
        assert_eq!(text.chars().count(), MAX_ERROR_TEXT + 1);
        assert!(text.ends_with('…'));
        let short = stanza_error(ErrorType::Modify, DefinedCondition::BadRequest, Some("short"), None);
        assert_eq!(short.texts["en"], "short");
    }

    #[test]
    fn conditions_round_trip() {
        let cases = [
            ("<invalid-jid xmlns='http://jabber.org/protocol/pubsub#errors'/>", PubSubErrorCondition::InvalidJid),
            ("<not-subscribed xmlns='http://jabber.org/protocol/pubsub#errors'/>", PubSubErrorCondition::NotSubscribed),
            ("<closed-node xmlns='http://jabber.org/protocol/pubsub#errors'/>", PubSubErrorCondition::ClosedNode),
            (
                "<invalid-payload xmlns='http://jabber.org/protocol/pubsub#errors'/>",
                PubSubErrorCondition::InvalidPayload,
            ),
            (
                "<payload-too-big xmlns='http://jabber.org/protocol/pubsub#errors'/>",
                PubSubErrorCondition::PayloadTooBig,
            ),
            ("<item-forbidden xmlns='http://jabber.org/protocol/pubsub#errors'/>", PubSubErrorCondition::ItemForbidden),
            (
                "<nodeid-required xmlns='http://jabber.org/protocol/pubsub#errors'/>",
                PubSubErrorCondition::NodeIdRequired,
            ),
            ("<item-required xmlns='http://jabber.org/protocol/pubsub#errors'/>", PubSubErrorCondition::ItemRequired),
            (
                "<payload-required xmlns='http://jabber.org/protocol/pubsub#errors'/>",
                PubSubErrorCondition::PayloadRequired,
            ),
            (
                "<unsupported xmlns='http://jabber.org/protocol/pubsub#errors' feature='purge-nodes'/>",
                PubSubErrorCondition::Unsupported { feature: "purge-nodes".into() },
            ),
        ];
        for (xml, condition) in cases {
            let elem: Element = xml.parse().unwrap();
            assert_eq!(PubSubErrorCondition::try_from(elem.clone()).unwrap(), condition);
            assert_eq!(Element::from(condition), elem);
        }
    }

    #[test]
    fn unknown_condition_is_a_mismatch() {
        let elem: Element = "<max-items-exceeded xmlns='http://jabber.org/protocol/pubsub#errors'/>".parse().unwrap();
        assert!(matches!(PubSubErrorCondition::try_from(elem), Err(xso::error::FromElementError::Mismatch(_))));
        let elem: Element = "<unsupported xmlns='http://jabber.org/protocol/pubsub#errors'/>".parse().unwrap();
        assert!(matches!(PubSubErrorCondition::try_from(elem), Err(xso::error::FromElementError::Invalid(_))));
    }

    #[test]
    fn iq_error_with_application_condition() {
        // The reply to a pull of a whitelist feed, `from` set to the component: Prosody
        // closes a component stream that sends a stanza with any other `from`.
        let elem: Element = "<iq xmlns='jabber:component:accept' type='error' id='q1' \
            from='feeds.localhost' to='eve@localhost/r'>\
            <error type='cancel'><not-allowed xmlns='urn:ietf:params:xml:ns:xmpp-stanzas'/>\
            <text xmlns='urn:ietf:params:xml:ns:xmpp-stanzas' xml:lang='en'>closed feed</text>\
            <closed-node xmlns='http://jabber.org/protocol/pubsub#errors'/></error></iq>"
            .parse()
            .unwrap();
        let error = stanza_error(
            ErrorType::Cancel,
            DefinedCondition::NotAllowed,
            Some("closed feed"),
            Some(PubSubErrorCondition::ClosedNode),
        );
        let component: Jid = "feeds.localhost".parse().unwrap();
        let requester: Jid = "eve@localhost/r".parse().unwrap();
        let iq = Iq::from_error("q1", error).with_from(component).with_to(requester);
        assert_eq!(Element::from(iq.clone()), elem);

        let Iq::Error { error, .. } = Iq::try_from(elem).unwrap() else {
            panic!("not an error iq");
        };
        assert_eq!(error.defined_condition, DefinedCondition::NotAllowed);
        assert_eq!(error.texts["en"], "closed feed");
        assert_eq!(PubSubErrorCondition::of(&error), Some(PubSubErrorCondition::ClosedNode));
    }

    #[test]
    fn attach_without_text() {
        let elem: Element = "<error xmlns='jabber:component:accept' type='cancel'>\
            <feature-not-implemented xmlns='urn:ietf:params:xml:ns:xmpp-stanzas'/>\
            <unsupported xmlns='http://jabber.org/protocol/pubsub#errors' feature='delete-nodes'/></error>"
            .parse()
            .unwrap();
        let error = PubSubErrorCondition::Unsupported { feature: "delete-nodes".into() }.attach(stanza_error(
            ErrorType::Cancel,
            DefinedCondition::FeatureNotImplemented,
            None,
            None,
        ));
        assert_eq!(Element::from(error.clone()), elem);
        assert_eq!(StanzaError::try_from(elem).unwrap(), error);
    }
}
