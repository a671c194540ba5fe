//! `<pubsub><items node/><set/></pubsub>`: a page of a view (XEP-0060 §6.5 with XEP-0059),
//! items by id, or the most recent items.

use super::{Answer, Ctx, fail};
use crate::errors::{bad_request, internal};
use crate::payloads::ItemsQuery;
use crate::payloads::order_by::take_order;
use feed::paging::Page;
use feed::ports::Store;
use feed::service::{PullRequest, Readable};
use minidom::Element;
use xmpp_parsers::rsm::{First, SetQuery, SetResult};
use xmpp_parsers::stanza_error::StanzaError;

pub struct Pull {
    req: PullRequest,
}

impl Pull {
    pub fn parse(mut payload: Element) -> Result<Pull, StanzaError> {
        let order_by = take_order(&mut payload).map_err(|e| bad_request(&e))?;
        let q = ItemsQuery::try_from(payload).map_err(|e| bad_request(&format!("malformed items request: {e}")))?;
        let req = PullRequest {
            max_items: q.items.max_items,
            ids: q.items.item_ids,
            order_by,
            ..paged(q.items.node, q.rsm.as_ref())
        };
        Ok(Pull { req })
    }

    pub fn node(&self) -> &str {
        &self.req.node
    }

    /// The page's body: kept for the feed's generation, or read and made of ready items
    /// (and kept).
    pub async fn apply<S: Store>(self, ctx: &Ctx<'_, S>) -> Result<Answer, StanzaError> {
        let req = self.req;
        let (view, generation) = readable_and_generation(ctx, &req.node).await?;
        if let Some(body) = ctx.ready.kept(&req, generation) {
            return Ok(Answer::Page(body));
        }
        // Items asked for by id come without paging information.
        let lookup = !req.ids.is_empty();
        let page = ctx.svc.pull_view(&view, req.clone()).await.map_err(fail)?;
        let set = (!lookup).then(|| rsm_result(&page));
        let body = ctx.ready.body(&view.view().feed, &req.node, &page.items, set.as_ref()).map_err(|e| {
            tracing::error!(error = %e, node = %req.node, "a page could not be written");
            internal("the page could not be written")
        })?;
        ctx.ready.keep(req, generation, body.clone());
        Ok(Answer::Page(body))
    }
}

/// A pull of `node` paged as the request's RSM `<set/>` asks (none: the first page).
pub fn paged(node: String, rsm: Option<&SetQuery>) -> PullRequest {
    PullRequest {
        node,
        max: rsm.and_then(|r| r.max).map(|m| m as u64),
        after: rsm.and_then(|r| r.after.clone()),
        before: rsm.and_then(|r| r.before.clone()),
        index: rsm.and_then(|r| r.index).map(|i| i as u64),
        ..PullRequest::default()
    }
}

/// The view `node` names, as the requester may read it, and its feed's generation, what a
/// kept page is checked against; refused as a pull of `node` would be.
pub async fn readable_and_generation<S: Store>(ctx: &Ctx<'_, S>, node: &str) -> Result<(Readable, i64), StanzaError> {
    let view = ctx.svc.readable_node(&ctx.actor, node).map_err(fail)?;
    let generation = ctx.ready.generation(ctx.svc, &view).await.map_err(fail)?;
    Ok((view, generation))
}

/// The RSM `<set/>` of a page: cursors for first and last, the first's index, the count.
pub fn rsm_result(page: &Page) -> SetResult {
    SetResult {
        first: page.first.map(|c| First { index: page.first_index.map(|i| i as usize), item: format!("cursor:{c}") }),
        last: page.last.map(|c| format!("cursor:{c}")),
        count: Some(page.count as usize),
    }
}
