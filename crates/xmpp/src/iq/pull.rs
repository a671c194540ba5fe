//! `<pubsub><items node/><set/></pubsub>`: a page of a view (XEP-0060 §6.5 with XEP-0059),
//! items by id, or the most recent items.

use super::{Answer, Ctx, fail};
use crate::errors::bad_request;
use crate::payloads::ItemsQuery;
use feed::paging::Page;
use feed::ports::Store;
use feed::service::PullRequest;
use minidom::Element;
use xmpp_parsers::rsm::{First, SetResult};
use xmpp_parsers::stanza_error::StanzaError;

pub struct Pull {
    req: PullRequest,
}

impl Pull {
    pub fn parse(payload: Element) -> Result<Pull, StanzaError> {
        let q = ItemsQuery::try_from(payload).map_err(|e| bad_request(&format!("malformed items request: {e}")))?;
        let rsm = q.rsm;
        let req = PullRequest {
            node: q.items.node,
            max: rsm.as_ref().and_then(|r| r.max).map(|m| m as u64),
            after: rsm.as_ref().and_then(|r| r.after.clone()),
            before: rsm.as_ref().and_then(|r| r.before.clone()),
            index: rsm.as_ref().and_then(|r| r.index).map(|i| i as u64),
            max_items: q.items.max_items,
            ids: q.items.item_ids,
        };
        Ok(Pull { req })
    }

    pub fn node(&self) -> &str {
        &self.req.node
    }

    pub async fn apply<S: Store>(self, ctx: &Ctx<'_, S>) -> Result<Answer, StanzaError> {
        let node = self.req.node.clone();
        // Items asked for by id come without paging information.
        let lookup = !self.req.ids.is_empty();
        let page = ctx.svc.pull(&ctx.actor, self.req).await.map_err(fail)?;
        let set = (!lookup).then(|| rsm_result(&page));
        Ok(Answer::Page { node, items: page.items, set })
    }
}

/// The RSM `<set/>` of a page: cursors for first and last, the first's index, the count.
pub fn rsm_result(page: &Page) -> SetResult {
    SetResult {
        first: page.first.map(|c| First { index: page.first_index.map(|i| i as usize), item: format!("cursor:{c}") }),
        last: page.last.map(|c| format!("cursor:{c}")),
        count: Some(page.count as usize),
    }
}
