//! The core's errors: a closed set named after the XEP-0060 conditions they become.
//! The XMPP glue maps each to exactly one stanza error (see `xmpp::errors`).

use super::node::NodeError;
use super::ports::StoreError;
use super::position::PositionError;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FeedError {
    /// The node names no view: unknown feed or bad parameters (`item-not-found`).
    #[error("{0}")]
    NodeNotFound(String),
    /// An item named by id does not exist (`item-not-found`).
    #[error("no item {0:?}")]
    ItemNotFound(String),
    /// Malformed request: bad position spec, parameters on a publish node… (`bad-request`).
    #[error("{0}")]
    BadRequest(String),
    /// The payload is not exactly one Atom entry (`bad-request` + `invalid-payload`).
    #[error("{0}")]
    InvalidPayload(String),
    /// The payload is over the limit (`not-acceptable` + `payload-too-big`).
    #[error("payload is {size} bytes, the limit is {limit}")]
    PayloadTooBig { size: usize, limit: usize },
    /// Not a publisher or admin (`forbidden`).
    #[error("{0}")]
    Forbidden(String),
    /// A whitelist feed and the sender is not on it (`not-allowed` + `closed-node`).
    #[error("this feed is restricted")]
    ClosedNode,
    /// Subscribing a JID other than one's own (`bad-request` + `invalid-jid`).
    #[error("{0}")]
    InvalidJid(String),
    /// Unsubscribing without a subscription (`unexpected-request` + `not-subscribed`).
    #[error("not subscribed to {0:?}")]
    NotSubscribed(String),
    /// A limit on subscriptions or requests was reached (`policy-violation`).
    #[error("{0}")]
    PolicyViolation(String),
    /// Something the service deliberately does not do (`feature-not-implemented`).
    #[error("{0}")]
    NotImplemented(String),
    /// Storage failed (`internal-server-error`; the text is logged, not sent).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<NodeError> for FeedError {
    fn from(e: NodeError) -> Self {
        FeedError::NodeNotFound(format!("no such node: {e}"))
    }
}

impl From<PositionError> for FeedError {
    fn from(e: PositionError) -> Self {
        FeedError::BadRequest(format!("bad position spec: {e}"))
    }
}
