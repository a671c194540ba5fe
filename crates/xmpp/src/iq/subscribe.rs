//! `<pubsub><subscribe node jid/></pubsub>` and `<unsubscribe node jid/>`: the sender
//! subscribes or unsubscribes its own JID to or from a view.

use super::{Answer, Ctx, fail};
use crate::errors::bad_request_app;
use crate::notify::chat_text;
use crate::payloads::PubSubErrorCondition as App;
use crate::payloads::subscriptions::in_pubsub;
use crate::payloads::{Headers, Push, PushBody, SyncHeaders};
use feed::ports::Store;
use feed::service::LastPublished;
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

    /// The subscription's result, followed by the view's last published item when the
    /// feed says `send_last_published_item = on_sub`. The subscription stands even when
    /// that item cannot be read or written (logged): the subscriber pulls it.
    pub async fn apply<S: Store>(self, ctx: &Ctx<'_, S>) -> Result<Answer, StanzaError> {
        let sub = ctx.svc.subscribe(&ctx.actor, &self.node, &self.jid).await.map_err(fail)?;
        let result = Some(in_pubsub(super::subscriptions::state(&sub)));
        let last = match ctx.svc.last_published(&ctx.actor, &self.node).await {
            Ok(last) => last,
            Err(e) => {
                tracing::warn!(node = %self.node, error = %e, "cannot read the last published item for a new subscription");
                None
            }
        };
        let Some(LastPublished { feed, item, view }) = last else { return Ok(Answer::Payload(result)) };
        let headers = Headers::from(SyncHeaders::of(&view));
        let text = chat_text(ctx.svc, &feed, &item);
        match PushBody::of(ctx.me.to_string(), &sub.node, &item, &headers, text.as_deref()) {
            Ok(body) => {
                let push = Push { to: sub.jid, id: format!("last-{}", sub.subid), body: body.into() };
                Ok(Answer::Then(result, push))
            }
            Err(e) => {
                tracing::warn!(node = %self.node, item = %item.id, error = %e, "cannot write the last published item");
                Ok(Answer::Payload(result))
            }
        }
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
