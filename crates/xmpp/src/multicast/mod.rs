//! Pushes through the server's XEP-0033 multicast service: one stanza per view and change
//! instead of one per subscriber.
//!
//! Every subscriber of a view under one node name gets the same bytes (the SHIM headers
//! belong to the view), so the server can copy one message to all of them: it parses the
//! push once and routes a copy per address. ejabberd ships such a service (mod_multicast);
//! for Prosody, `prosody/mod_component_multicast.lua` is ours. Both offer it only to the
//! component domains their configuration names.
//!
//! - [`discovery`]: finding the service (disco#info on the server's domain and on the
//!   items it lists) and its address limit;
//! - [`batch`]: grouping a change's pushes by identical push and cutting each group into
//!   `bcc` batches within the service's address limit and the stanza size limit; groups
//!   too small to gain go one stanza per subscriber;
//! - [`stanza`]: the multicast message itself;
//! - [`fallback`]: remembering sent batches so a refused one goes out one by one after all,
//!   and the refusal, so later changes do too;
//! - [`link`]: all of the above for one connection to the server, as the dispatcher and
//!   the pusher use it.

pub mod batch;
pub mod discovery;
pub mod fallback;
pub mod link;
pub mod stanza;

pub use batch::{Limits, Outgoing, plan};
pub use discovery::{Discovery, Query, Service};
pub use fallback::{Fallback, Refusal};
pub use link::{Answer, LinkMulticast};
pub use stanza::MulticastPush;

/// A push body for the tests of this module: a published entry on `node`.
#[cfg(test)]
fn test_body(node: &str) -> std::sync::Arc<crate::payloads::PushBody> {
    use crate::payloads::PushBody;
    use crate::payloads::shim::{Headers, SyncHeaders};
    let headers = Headers::from(SyncHeaders {
        total_items: 3,
        previous_cursor: Some("1_0_1".into()),
        last_cursor: "2_0_2".into(),
    });
    let entry = "<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:x</id></entry>";
    std::sync::Arc::new(PushBody::new("feeds.localhost".into(), node, "x", Some(entry), &headers).expect("body"))
}
