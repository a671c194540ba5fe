//! disco#info: the service's identity and features, the SHIM header list (XEP-0131 §5),
//! or a node's meta-data (XEP-0060 §5.4).

use super::{Ctx, fail};
use crate::payloads::commands::COMMANDS;
use crate::payloads::{ATOM, SHIM, shim::HEADER_FEATURES};
use feed::ports::Store;
use minidom::Element;
use xmpp_parsers::data_forms::{DataForm, DataFormType, Field};
use xmpp_parsers::disco::{DiscoInfoResult, Identity};
use xmpp_parsers::ns;
use xmpp_parsers::stanza_error::StanzaError;

/// The pubsub features we announce (XEP-0060 §10), without the namespace prefix.
const PUBSUB_FEATURES: [&str; 8] = [
    "retrieve-items",
    "subscribe",
    "retrieve-subscriptions",
    "publish",
    "retract-items",
    "meta-data",
    "rsm",
    "item-ids",
];

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
                for f in PUBSUB_FEATURES {
                    result.features.insert(format!("{}#{f}", ns::PUBSUB));
                }
            }
            Some(SHIM) => {
                result.features.extend(HEADER_FEATURES.iter().map(|f| f.to_string()));
            }
            Some(node) => {
                let info = ctx.svc.node_info(&ctx.actor, node).await.map_err(fail)?;
                result.identities.push(Identity::new("pubsub", "leaf", "en", info.title.clone()));
                result.features.insert(ns::PUBSUB.to_string());
                let meta = format!("{}#meta-data", ns::PUBSUB);
                result.extensions.push(DataForm::new(
                    DataFormType::Result_,
                    &meta,
                    vec![
                        Field::text_single("pubsub#title", &info.title),
                        Field::text_single("pubsub#description", &info.description),
                        Field::text_single("pubsub#type", ATOM),
                        Field::text_single("pubsub#num_subscribers", &info.subscribers.to_string()),
                        Field::text_single("pubsub#num_items", &info.count.to_string()),
                    ],
                ));
            }
        }
        Ok(Some(result.into()))
    }
}
