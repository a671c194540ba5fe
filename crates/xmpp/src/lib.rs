//! The XMPP face: stanzas in, service requests out, outcomes back into stanzas.
//!
//! [`component`] is the XEP-0114 link (login, the XML stream with its limits, keepalive,
//! reconnects); [`dispatch`] hands what arrives to what handles it, admitting requests at
//! their sender's rate and within their domain's slots ([`domain_slots`]); [`router`] serves
//! one request through [`iq`], a file per request kind; [`notify`] turns committed changes
//! into pushes; [`errors`] is the one table of stanza errors.
//!
//! [`payloads`] holds the XML payloads xmpp-parsers lacks or cannot parse the way we need
//! them (the RSM-paged pubsub items query and result, the publish request with its raw item
//! payload, XEP-0131 SHIM headers, pubsub#errors conditions) and the Atom entry inspection
//! that turns a publish `<item>` into a [`feed::Entry`]. [`stanza_parts`] is how replies and
//! pushes are written: xso's items with stored XML spliced in as it is; [`reply`] is what
//! the router answers with; [`ready_pages`] makes pages of items written once per item
//! version and keeps the bodies most asked for, by the feed's generation. [`multicast`]
//! sends one push to many subscribers through the server's XEP-0033 service.

pub mod adhoc;
pub mod bounce;
pub mod component;
pub mod dispatch;
pub mod domain_slots;
pub mod errors;
pub mod iq;
pub mod mam_page;
pub mod multicast;
pub mod notify;
pub mod payloads;
pub mod ready_pages;
pub mod reply;
pub mod router;
pub mod stanza_parts;
