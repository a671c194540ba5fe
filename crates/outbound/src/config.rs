//! `[outbound]`: how the requests to URLs others give (WebSub callbacks, sources) resolve names.

use serde::Deserialize;
use std::net::SocketAddr;

/// The outbound requests' resolver.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutboundConfig {
    /// DNS servers (`ip:port`, over UDP and TCP) asked for callback and source host names.
    /// Empty: the system's, from `/etc/resolv.conf`, with `/etc/hosts` first.
    pub nameservers: Vec<SocketAddr>,
}
