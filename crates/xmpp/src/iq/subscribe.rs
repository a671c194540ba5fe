//! `<pubsub><subscribe node jid/></pubsub>` and `<unsubscribe node jid/>`: the sender
//! subscribes or unsubscribes its own JID to or from a view.

use super::{Ctx, fail};
use crate::errors::bad_request_app;
use crate::payloads::PubSubErrorCondition as App;
use crate::payloads::subscriptions::in_pubsub;
use feed::ports::Store;
use minidom::Element;
use xmpp_parsers::stanza_error::StanzaError;

pub struct Subscribe {
    pub node: String,
    jid: String,
}

pub struct Unsubscribe {
    pub node: String,
    jid: String,
}

/// The `node` and `jid` of a subscribe or unsubscribe element, both required.
fn node_and_jid(op: &Element) -> Result<(String, String), StanzaError> {
    let what = op.name();
    let node = op.attr("node").ok_or_else(|| bad_request_app(&format!("{what} needs a node"), App::NodeIdRequired))?;
    let jid = op.attr("jid").ok_or_else(|| bad_request_app(&format!("{what} needs a jid"), App::InvalidJid))?;
    Ok((node.to_string(), jid.to_string()))
}

impl Subscribe {
    pub fn parse(op: &Element) -> Result<Subscribe, StanzaError> {
        node_and_jid(op).map(|(node, jid)| Subscribe { node, jid })
    }

    pub async fn apply<S: Store>(self, ctx: &Ctx<'_, S>) -> Result<Option<Element>, StanzaError> {
        let sub = ctx.svc.subscribe(&ctx.actor, &self.node, &self.jid).await.map_err(fail)?;
        Ok(Some(in_pubsub(super::subscriptions::state(&sub))))
    }
}

impl Unsubscribe {
    pub fn parse(op: &Element) -> Result<Unsubscribe, StanzaError> {
        node_and_jid(op).map(|(node, jid)| Unsubscribe { node, jid })
    }

    pub async fn apply<S: Store>(self, ctx: &Ctx<'_, S>) -> Result<Option<Element>, StanzaError> {
        ctx.svc.unsubscribe(&ctx.actor, &self.node, &self.jid).await.map_err(fail)?;
        Ok(None)
    }
}
