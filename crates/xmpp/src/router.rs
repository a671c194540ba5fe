//! Dispatch of inbound iqs: parse once into a typed [`Request`], apply it, write the reply.
//! Every `get`/`set` gets exactly one reply, `from` the component; results and errors
//! addressed to us (keepalive pongs, stray replies) get none, as RFC 6120 §8.2.3 wants.

use super::errors::{bad_request, policy_violation};
use super::iq::{Answer, Ctx, Request};
use super::mam_page::MamReply;
use super::payloads::Push;
use super::ready_pages::Ready;
use super::reply::{ItemsReply, Reply};
use feed::ports::Store;
use feed::service::Service;
use jid::Jid;
use std::sync::Arc;
use tracing::Instrument;
use xmpp_parsers::iq::Iq;

/// Turns iqs into service calls and service outcomes into replies.
#[derive(Clone)]
pub struct Router<S: Store> {
    svc: Service<S>,
    me: Jid,
    ready: Arc<Ready>,
}

/// A served request: what kind it was (for metrics), its reply, and a push that follows
/// the reply (the last published item after a subscription's result).
pub struct Served {
    pub kind: &'static str,
    pub reply: Reply,
    pub then: Option<Push>,
}

impl<S: Store> Router<S> {
    /// Serves `svc` as `me`, answering pulls with pages made and kept by `ready`.
    pub fn new(svc: Service<S>, me: Jid, ready: Arc<Ready>) -> Self {
        Router { svc, me, ready }
    }

    pub fn me(&self) -> &Jid {
        &self.me
    }

    pub fn service(&self) -> &Service<S> {
        &self.svc
    }

    /// The reply to an iq, or `None` for results and errors (which need none) and for
    /// requests without a sender (which cannot be answered; the server always sets one).
    /// Each request is served in its own span with its kind, node, sender and id.
    pub async fn handle_iq(&self, iq: Iq) -> Option<Served> {
        let (from, id, payload, set) = match iq {
            Iq::Get { from, id, payload, .. } => (from?, id, payload, false),
            Iq::Set { from, id, payload, .. } => (from?, id, payload, true),
            Iq::Result { .. } | Iq::Error { .. } => return None,
        };
        let request = Request::parse(payload, set);
        let kind = request.kind();
        let span = tracing::debug_span!("request", kind, node = request.node(), %from, %id);
        let ctx = Ctx { svc: &self.svc, ready: &self.ready, me: &self.me, actor: from.to_bare().to_string() };
        let answer = request.apply(&ctx).instrument(span).await;
        let me = self.me.clone();
        let (reply, then) = match answer {
            Ok(Answer::Payload(payload)) => {
                (Reply::Iq(Iq::Result { from: Some(me), to: Some(from), id, payload }), None)
            }
            Ok(Answer::Then(payload, push)) => {
                (Reply::Iq(Iq::Result { from: Some(me), to: Some(from), id, payload }), Some(push))
            }
            Ok(Answer::Page(body)) => (Reply::Items(ItemsReply::new(me, from, id, body)), None),
            Ok(Answer::Mam { queryid, page }) => {
                (Reply::Mam(MamReply::new(me, from, id, queryid.as_deref(), page)), None)
            }
            Err(error) => (Reply::Iq(Iq::Error { from: Some(me), to: Some(from), id, error, payload: None }), None),
        };
        Some(Served { kind, reply, then })
    }

    /// An iq that did not parse (say, a get with no child): `bad-request` saying why; one
    /// over the stream's size or depth limit: `policy-violation`.
    pub fn malformed(&self, to: Jid, id: String, why: &str, over_limit: bool) -> Iq {
        let error = if over_limit {
            policy_violation(&format!("request refused: {why}"))
        } else {
            bad_request(&format!("malformed request: {why}"))
        };
        Iq::Error { from: Some(self.me.clone()), to: Some(to), id, error, payload: None }
    }
}
