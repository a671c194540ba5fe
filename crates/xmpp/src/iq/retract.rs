//! `<pubsub><retract node><item id/></retract></pubsub>`: retract one item (it stays as a
//! tombstone).

use super::{Ctx, fail};
use crate::errors::bad_request_app;
use crate::payloads::PubSubErrorCondition as App;
use feed::ports::Store;
use minidom::Element;
use xmpp_parsers::ns;
use xmpp_parsers::stanza_error::StanzaError;

pub struct Retract {
    pub node: String,
    id: String,
}

impl Retract {
    /// Parses the `<retract/>` element.
    pub fn parse(op: &Element) -> Result<Retract, StanzaError> {
        let node = op.attr("node").ok_or_else(|| bad_request_app("retract needs a node", App::NodeIdRequired))?;
        let ids: Vec<&str> = op.children().filter(|c| c.is("item", ns::PUBSUB)).filter_map(|c| c.attr("id")).collect();
        let [id] = ids[..] else {
            return Err(bad_request_app("retract exactly one <item id=…/>", App::ItemRequired));
        };
        Ok(Retract { node: node.to_string(), id: id.to_string() })
    }

    pub async fn apply<S: Store>(self, ctx: &Ctx<'_, S>) -> Result<Option<Element>, StanzaError> {
        ctx.svc.retract(&ctx.actor, &self.node, self.id).await.map_err(fail)?;
        Ok(None)
    }
}
