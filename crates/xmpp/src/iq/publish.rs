//! `<pubsub><publish node><item id>ENTRY</item></publish></pubsub>`: publish or update one
//! item. The sender's right to publish is checked before the entry is looked at.

use super::{Ctx, fail};
use crate::errors::{bad_request, bad_request_app};
use crate::payloads::{PubSubErrorCondition as App, PublishItem, PublishRequest, publish_result};
use feed::FeedError;
use feed::ports::Store;
use minidom::Element;
use xmpp_parsers::stanza_error::StanzaError;

pub struct Publish {
    node: String,
    item: PublishItem,
}

impl Publish {
    pub fn parse(payload: Element) -> Result<Publish, StanzaError> {
        let req = PublishRequest::from_tree(payload).map_err(|e| bad_request(&format!("malformed publish: {e}")))?;
        let node = req.publish.node;
        let Ok([item]) = <[PublishItem; 1]>::try_from(req.publish.items) else {
            return Err(bad_request_app("publish exactly one <item/>", App::ItemRequired));
        };
        Ok(Publish { node, item })
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    pub async fn apply<S: Store>(self, ctx: &Ctx<'_, S>) -> Result<Option<Element>, StanzaError> {
        let target = ctx.svc.publish_target(&ctx.actor, &self.node).await.map_err(fail)?;
        let entry = self.item.entry().map_err(|e| fail(FeedError::InvalidPayload(e.to_string())))?;
        let item = ctx.svc.publish_to(target, self.item.id, entry).await.map_err(fail)?.item;
        Ok(Some(publish_result(&self.node, &item.id).into()))
    }
}
