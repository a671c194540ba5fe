//! The requests smartfeeds makes to URLs that others give it: WebSub callbacks today, feed
//! sources later. Such a URL must not become a way into the network smartfeeds runs in, so
//! every one of these requests goes through this crate's [`Client`], under one policy:
//!
//! - a host name is resolved once per connection, by the client's own resolver ([`Guard`]),
//!   which drops every address that is not public (unless private ones are allowed); the
//!   connection is made to exactly the addresses that passed. A name that answers a public
//!   address when a URL is checked and a loopback one when it is used (DNS rebinding) is
//!   therefore refused at connection time, not connected to;
//! - a host written as an IP address never reaches a resolver, so it is checked before the
//!   request is made. The URL parser has already read every spelling of an IPv4 address
//!   (`2130706433`, `0177.0.0.1`, `0x7f.1`, `127.1`) as the address it means, and IPv6
//!   addresses that embed an IPv4 one (mapped, compatible, NAT64, 6to4) are judged by it;
//! - `localhost` and every name under `.localhost` are refused without asking anyone;
//! - redirects are never followed (a caller that wants the target makes a new request,
//!   which is checked like any other); proxies from the environment are not used (a proxy
//!   would resolve names itself, past the check).
//!
//! Which resolver answers is `[outbound] nameservers` ([`OutboundConfig`]): the system's
//! (`/etc/resolv.conf`, `/etc/hosts`) unless set.

mod address;
mod client;
mod config;
mod guard;
mod post;

pub use address::{is_local_name, is_public};
pub use client::Client;
pub use config::OutboundConfig;
pub use guard::{Guard, Refused};
pub use post::{Answer, PostFailed, PostTarget, error_chain};
