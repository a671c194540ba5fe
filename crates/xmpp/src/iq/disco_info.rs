//! disco#info: the service's identity and features, the SHIM header list (XEP-0131 §5),
//! or a node's meta-data (XEP-0060 §5.4).

use super::{Ctx, fail};
use crate::payloads::commands::COMMANDS;
use crate::payloads::order_by::{ORDER_BY, ORDER_BY_0};
use crate::payloads::{SHIM, shim::HEADER_FEATURES};
use feed::policy::Access;
use feed::ports::Store;
use feed::position::rfc3339;
use minidom::Element;
use xmpp_parsers::data_forms::{DataForm, DataFormType, Field};
use xmpp_parsers::disco::{DiscoInfoResult, Identity};
use xmpp_parsers::ns;
use xmpp_parsers::stanza_error::StanzaError;

/// The pubsub features the service implements (XEP-0060 §10), without the namespace
/// prefix; the one list to extend when a feature is added.
const PUBSUB_FEATURES: &[&str] = &[
    // `<items/>`, with `max_items` and `<item id/>` children (§6.5).
    "retrieve-items",
    "item-ids",
    // XEP-0059 paging of `<items/>` (§6.5.4).
    "rsm",
    "subscribe",
    "retrieve-subscriptions",
    "publish",
    "retract-items",
    // Items are stored, not only relayed.
    "persistent-items",
    // The §5.4 form on every node's disco#info.
    "meta-data",
    // The two access models a feed's `access` names (§4.5).
    "access-open",
    "access-whitelist",
];

/// The features beside XEP-0060's: MAM on every view (XEP-0313 with a `node`), without
/// `#extended`; XEP-0413 order-by in both its versions, and (0.2) where it applies.
const ARCHIVE_FEATURES: &[&str] = &[
    ns::MAM,
    ORDER_BY,
    ORDER_BY_0,
    "urn:xmpp:order-by:1@urn:xmpp:mam:2",
    "urn:xmpp:order-by:1@http://jabber.org/protocol/pubsub",
];

/// `pubsub#type` of every node: its items are Atom entries (XEP-0472).
pub const SOCIAL_FEED: &str = "urn:xmpp:pubsub-social-feed:1";

/// XEP-0060's name (§16.4.3) for a feed's `access`.
pub fn access_model(access: Access) -> &'static str {
    match access {
        Access::Open => "open",
        Access::Whitelist => "whitelist",
    }
}

pub struct DiscoInfo {
    node: Option<String>,
}

impl DiscoInfo {
    pub fn parse(query: &Element) -> DiscoInfo {
        DiscoInfo { node: query.attr("node").map(String::from) }
    }

    pub fn node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    pub async fn apply<S: Store>(self, ctx: &Ctx<'_, S>) -> Result<Option<Element>, StanzaError> {
        let mut result = DiscoInfoResult {
            node: self.node.clone(),
            identities: Vec::new(),
            features: Default::default(),
            extensions: Vec::new(),
        };
        match self.node.as_deref() {
            None => {
                result.identities.push(Identity::new("pubsub", "service", "en", "Smart Feeds"));
                for f in [ns::DISCO_INFO, ns::DISCO_ITEMS, ns::PING, ns::PUBSUB, ns::RSM, SHIM, COMMANDS] {
                    result.features.insert(f.to_string());
                }
                for f in PUBSUB_FEATURES.iter() {
                    result.features.insert(format!("{}#{f}", ns::PUBSUB));
                }
                result.features.extend(ARCHIVE_FEATURES.iter().map(|f| f.to_string()));
            }
            Some(SHIM) => {
                result.features.extend(HEADER_FEATURES.iter().map(|f| f.to_string()));
            }
            Some(node) => {
                let info = ctx.svc.node_info(&ctx.actor, node).await.map_err(fail)?;
                result.identities.push(Identity::new("pubsub", "leaf", "en", info.title.clone()));
                result.features.insert(ns::PUBSUB.to_string());
                // Each view is an archive of its own.
                result.features.insert(ns::MAM.to_string());
                let meta = format!("{}#meta-data", ns::PUBSUB);
                let mut fields = vec![
                    Field::text_single("pubsub#title", &info.title),
                    Field::text_single("pubsub#description", &info.description),
                    Field::text_single("pubsub#type", SOCIAL_FEED),
                    Field::text_single("pubsub#access_model", access_model(info.access)),
                    Field::text_single("pubsub#num_subscribers", &info.subscribers.to_string()),
                    Field::text_single("pubsub#num_items", &info.count.to_string()),
                ];
                // A feed made empty has no creation date yet: its first publish gives it one.
                if let Some(ms) = info.created {
                    fields.push(Field::text_single("pubsub#creation_date", &rfc3339(ms)));
                }
                result.extensions.push(DataForm::new(DataFormType::Result_, &meta, fields));
            }
        }
        Ok(Some(result.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_models_carry_xep_0060_names() {
        assert_eq!(access_model(Access::Open), "open");
        assert_eq!(access_model(Access::Whitelist), "whitelist");
    }

    #[test]
    fn every_feature_is_named_once() {
        let mut seen = std::collections::HashSet::new();
        assert!(PUBSUB_FEATURES.iter().all(|f| seen.insert(*f)), "{PUBSUB_FEATURES:?}");
    }
}
