//! Subscription replies (XEP-0060 §6.1 and §5.6). xmpp-parsers has these types, but with
//! private fields, so they cannot be built outside it.

use minidom::Element;
use xmpp_parsers::ns;
use xso::{AsXml, FromXml};

/// `<subscription node jid subid subscription="subscribed"/>`.
#[derive(FromXml, AsXml, Debug, Clone, PartialEq, Eq)]
#[xml(namespace = ns::PUBSUB, name = "subscription")]
pub struct SubscriptionState {
    /// The node as the subscriber wrote it.
    #[xml(attribute)]
    pub node: String,
    #[xml(attribute)]
    pub jid: String,
    #[xml(attribute)]
    pub subid: String,
    /// Always `subscribed`: there is no pending or unconfigured state here.
    #[xml(attribute)]
    pub subscription: String,
}

/// `<subscriptions [node]>` with the sender's subscriptions.
#[derive(FromXml, AsXml, Debug, Clone, PartialEq, Eq)]
#[xml(namespace = ns::PUBSUB, name = "subscriptions")]
pub struct SubscriptionList {
    #[xml(attribute(default))]
    pub node: Option<String>,
    #[xml(child(n = ..))]
    pub subscriptions: Vec<SubscriptionState>,
}

/// `<pubsub>` around one subscription or a list of them.
pub fn in_pubsub(child: impl Into<Element>) -> Element {
    Element::builder("pubsub", ns::PUBSUB).append(child.into()).build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_serialises_with_all_attributes() {
        let s = SubscriptionState {
            node: "c?order=modified".into(),
            jid: "alice@localhost/r".into(),
            subid: "ab12".into(),
            subscription: "subscribed".into(),
        };
        let el = in_pubsub(SubscriptionList { node: None, subscriptions: vec![s.clone()] });
        let xml = String::from(&el);
        assert!(xml.contains("node='c?order=modified'") && xml.contains("subscription='subscribed'"), "{xml}");
        let back = SubscriptionList::try_from(el.get_child("subscriptions", ns::PUBSUB).unwrap().clone()).unwrap();
        assert_eq!(back.subscriptions, vec![s]);
    }
}
