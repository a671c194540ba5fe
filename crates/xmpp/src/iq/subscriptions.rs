//! `<pubsub><subscriptions node?/></pubsub>`: the sender's own subscriptions.

use super::{Ctx, fail};
use crate::payloads::subscriptions::{SubscriptionList, SubscriptionState, in_pubsub};
use feed::ports::{Store, Subscription};
use minidom::Element;
use xmpp_parsers::stanza_error::StanzaError;

pub struct Subscriptions {
    node: Option<String>,
}

impl Subscriptions {
    /// Parses the `<subscriptions/>` element.
    pub fn parse(op: &Element) -> Subscriptions {
        Subscriptions { node: op.attr("node").map(String::from) }
    }

    pub fn node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    pub async fn apply<S: Store>(self, ctx: &Ctx<'_, S>) -> Result<Option<Element>, StanzaError> {
        let subs = ctx.svc.subscriptions(&ctx.actor, self.node.as_deref()).await.map_err(fail)?;
        let list = SubscriptionList { node: self.node, subscriptions: subs.iter().map(state).collect() };
        Ok(Some(in_pubsub(list)))
    }
}

/// A stored subscription as XEP-0060 shows it.
pub fn state(s: &Subscription) -> SubscriptionState {
    SubscriptionState {
        node: s.node.clone(),
        jid: s.jid.clone(),
        subid: s.subid.clone(),
        subscription: "subscribed".into(),
    }
}
