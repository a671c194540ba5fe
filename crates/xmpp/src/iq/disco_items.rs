//! disco#items: the feeds the sender may read (paged with RSM by name), a node's item ids
//! (its first page), or the admin commands (XEP-0050; listed to admins only).

use super::{Ctx, fail};
use crate::adhoc::COMMAND_LIST;
use crate::errors::bad_request;
use crate::payloads::commands::COMMANDS;
use feed::policy::Action;
use feed::ports::Store;
use feed::service::PullRequest;
use minidom::Element;
use xmpp_parsers::disco::{DiscoItemsQuery, DiscoItemsResult, Item as DiscoItem};
use xmpp_parsers::rsm::{First, SetResult};
use xmpp_parsers::stanza_error::StanzaError;

pub struct DiscoItems {
    query: DiscoItemsQuery,
}

impl DiscoItems {
    pub fn parse(payload: Element) -> Result<DiscoItems, StanzaError> {
        let query =
            DiscoItemsQuery::try_from(payload).map_err(|e| bad_request(&format!("malformed disco#items: {e}")))?;
        Ok(DiscoItems { query })
    }

    pub fn node(&self) -> Option<&str> {
        self.query.node.as_deref()
    }

    pub async fn apply<S: Store>(self, ctx: &Ctx<'_, S>) -> Result<Option<Element>, StanzaError> {
        let q = self.query;
        let item = |node: Option<String>, name: String| DiscoItem { jid: ctx.me.clone(), node, name: Some(name) };
        if q.node.as_deref() == Some(COMMANDS) {
            // Only admins may run the commands, so only admins see them.
            let visible = ctx.svc.may(&ctx.actor, Action::Administer, "").is_ok();
            let items = COMMAND_LIST
                .iter()
                .filter(|_| visible)
                .map(|(node, name)| item(Some(node.to_string()), name.to_string()))
                .collect();
            return Ok(Some(DiscoItemsResult { node: q.node, items, rsm: None }.into()));
        }
        if let Some(node) = q.node {
            // A leaf node's items are its item ids, first page of the view.
            let req = PullRequest { node: node.clone(), ..Default::default() };
            let page = ctx.svc.pull(&ctx.actor, req).await.map_err(fail)?;
            let items = page.items.into_iter().map(|i| item(None, i.id)).collect();
            return Ok(Some(DiscoItemsResult { node: Some(node), items, rsm: None }.into()));
        }
        let (after, max) = q.rsm.map_or((None, None), |r| (r.after, r.max));
        let max = max.unwrap_or(100).min(ctx.svc.policy().limits.max_page as usize);
        let feeds = ctx.svc.feeds(&ctx.actor, after, max).await.map_err(fail)?;
        let set = match (feeds.first(), feeds.last()) {
            (Some(f), Some(l)) => Some(SetResult {
                first: Some(First { index: None, item: f.name.clone() }),
                last: Some(l.name.clone()),
                count: None,
            }),
            _ => None,
        };
        let items = feeds.into_iter().map(|f| item(Some(f.name), f.title)).collect();
        Ok(Some(DiscoItemsResult { node: None, items, rsm: set }.into()))
    }
}
