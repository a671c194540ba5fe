//! XML payloads of the pubsub service, derived with `xso` in the style of xmpp-parsers: one
//! file per protocol piece, each type with its namespace and element name, tests at the bottom
//! of each file (parse a literal, check the fields, serialise back, compare).
//!
//! What xmpp-parsers 0.23 already does right we reuse rather than copy:
//! [`xmpp_parsers::rsm::SetQuery`] / [`xmpp_parsers::rsm::SetResult`] for RSM (an empty
//! `<before/>` parses as `Some("")`, "the last page"). What it lacks or gets in our way we define here:
//!
//! - [`items`]: `<pubsub><items/><set/></pubsub>`, which `PubSub::try_from` rejects, and the
//!   paged items result;
//! - [`publish_item`]: `<pubsub><publish><item/></publish></pubsub>` keeping *every* child of the
//!   item, because xmpp-parsers' `pubsub::Item` keeps the first element and silently drops
//!   the rest (a payload of two entries would pass as one);
//! - [`shim`]: XEP-0131 headers (xmpp-parsers has no SHIM module);
//! - [`event`]: the push headline (pubsub#event + SHIM headers), shared by all its copies;
//! - [`pubsub_errors`]: the `http://jabber.org/protocol/pubsub#errors` conditions carried in
//!   `StanzaError::other`;
//! - the Atom entry inspector and RFC 6721 tombstones are the core's ([`feed::atom`]);
//! - [`addresses`]: XEP-0033 `<addresses/>`, for pushes through a multicast service;
//! - [`order_by`]: XEP-0413 `<order/>`, in items requests and MAM queries.

pub mod addresses;
pub mod commands;
pub mod event;
pub mod items;
pub mod order_by;
pub mod publish_item;
pub mod pubsub_errors;
pub mod shim;
pub mod subscriptions;

pub use event::{Push, PushBody};
pub use feed::atom::{
    ATOM, DeletedEntry, EntryError, TOMBSTONES, inspect_entry, inspect_item, parse_stored, tombstone,
};
pub use items::{ItemsPage, ItemsQuery, ItemsRequest, ItemsResult, PageItem};
pub use publish_item::{Publish, PublishItem, PublishRequest, publish_result};
pub use pubsub_errors::{PubSubErrorCondition, stanza_error};
pub use shim::{Header, Headers, SyncHeaders};

/// Whether `el` holds no text but whitespace between its children: what xso (and the
/// types xmpp-parsers derives with it) accepts around child elements. The typings that keep
/// elements as read (`component::typed`, [`PublishRequest::from_tree`]) take only those.
pub(crate) fn blank_between_children(el: &minidom::Element) -> bool {
    el.texts().all(|t| t.chars().all(|c| c.is_ascii_whitespace()))
}

/// XEP-0131 Stanza Headers and Internet Metadata.
pub const SHIM: &str = "http://jabber.org/protocol/shim";
