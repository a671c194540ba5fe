//! [`Guard`]: the resolver of outbound requests, and the check of their URLs.

use crate::address::{is_local_name, is_public};
use crate::config::OutboundConfig;
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::xfer::Protocol;
use std::net::{IpAddr, SocketAddr};
use url::{Host, Url};

/// Why an outbound URL is refused. The messages name no address: the one who gave the URL
/// learns nothing about the names of the network smartfeeds runs in.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refused {
    #[error("is not an http:// or https:// URL with a host")]
    NotHttp,
    #[error("names the local host (loopback: refused like private addresses)")]
    LocalName,
    #[error("resolves to a private, loopback, link-local or multicast address")]
    Private,
    #[error("does not resolve")]
    Unresolved,
}

/// The system's resolver configuration.
const RESOLV_CONF: &str = "/etc/resolv.conf";

/// A configuration asking these name servers, over UDP and TCP.
fn servers(addrs: &[SocketAddr]) -> ResolverConfig {
    let mut c = ResolverConfig::new();
    for &addr in addrs {
        c.add_name_server(NameServerConfig::new(addr, Protocol::Udp));
        c.add_name_server(NameServerConfig::new(addr, Protocol::Tcp));
    }
    c
}

/// The system's configuration from `resolv.conf`'s bytes. Where the file is missing, cannot
/// be read or names no name server, the name server on the local host, as the C library's
/// resolver does then: the service starts, and outbound names fail to resolve when they are
/// used if nothing answers there (logged once here, and with each failed request).
fn system_config(read: std::io::Result<Vec<u8>>) -> (ResolverConfig, ResolverOpts) {
    let parsed = read
        .map_err(|e| e.to_string())
        .and_then(|bytes| hickory_resolver::system_conf::parse_resolv_conf(bytes).map_err(|e| e.to_string()));
    parsed.unwrap_or_else(|why| {
        let local = SocketAddr::from(([127, 0, 0, 1], 53));
        tracing::warn!(file = RESOLV_CONF, error = %why, name_server = %local, "no usable DNS configuration; asking the local host's name server");
        (servers(&[local]), ResolverOpts::default())
    })
}

/// Resolves the host names of outbound requests, keeping only public addresses unless
/// private ones are allowed. The [`Client`](crate::Client) connects through it, so the
/// addresses checked are the addresses connected to.
#[derive(Clone)]
pub struct Guard {
    resolver: TokioResolver,
    allow_private: bool,
    /// Addresses treated as public although they are not: always empty, but for the guards
    /// [`Guard::for_tests_treating_as_public`] makes (the `testing` feature).
    treated_as_public: std::sync::Arc<[IpAddr]>,
}

impl Guard {
    /// A guard asking `config`'s name servers (the system's when none are set).
    pub fn new(config: &OutboundConfig, allow_private: bool) -> Result<Guard, String> {
        let (c, options) = if config.nameservers.is_empty() {
            system_config(std::fs::read(RESOLV_CONF))
        } else {
            (servers(&config.nameservers), ResolverOpts::default())
        };
        let builder = TokioResolver::builder_with_config(c, TokioConnectionProvider::default()).with_options(options);
        Ok(Guard { resolver: builder.build(), allow_private, treated_as_public: std::sync::Arc::new([]) })
    }

    /// For tests only (the `testing` feature, never enabled by the product): a guard that
    /// refuses private addresses but treats `public` as public. On a machine where every
    /// test server is on loopback, it lets a test tell an allowed address (`127.0.0.1`) from
    /// a refused one (`127.0.0.2`).
    #[cfg(feature = "testing")]
    pub fn for_tests_treating_as_public(config: &OutboundConfig, public: &[IpAddr]) -> Result<Guard, String> {
        let mut guard = Guard::new(config, false)?;
        guard.treated_as_public = public.into();
        Ok(guard)
    }

    fn is_public(&self, ip: IpAddr) -> bool {
        is_public(ip) || self.treated_as_public.contains(&ip)
    }

    pub fn allows_private(&self) -> bool {
        self.allow_private
    }

    /// Checks what can be checked of `url` without resolving: http or https, a host, not a
    /// local name, not a private IP address (unless allowed).
    pub fn check_host(&self, url: &Url) -> Result<(), Refused> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refused::NotHttp);
        }
        match url.host() {
            None => Err(Refused::NotHttp),
            Some(Host::Domain(name)) if is_local_name(name) && !self.allow_private => Err(Refused::LocalName),
            Some(Host::Domain(_)) => Ok(()),
            Some(Host::Ipv4(ip)) => self.check_ip(IpAddr::V4(ip)),
            Some(Host::Ipv6(ip)) => self.check_ip(IpAddr::V6(ip)),
        }
    }

    /// [`check_host`](Self::check_host), then resolves a host name and refuses it when any of
    /// its addresses is not public (unless allowed) or when it does not resolve. What a
    /// request asks for first, to refuse a bad URL with a clear answer; connections check
    /// again (a name may resolve differently by then).
    pub async fn check(&self, url: &Url) -> Result<(), Refused> {
        self.check_host(url)?;
        let Some(Host::Domain(name)) = url.host() else { return Ok(()) };
        let addrs = self.lookup(name).await?;
        if !self.allow_private && addrs.iter().any(|ip| !self.is_public(*ip)) {
            return Err(Refused::Private);
        }
        Ok(())
    }

    fn check_ip(&self, ip: IpAddr) -> Result<(), Refused> {
        if self.allow_private || self.is_public(ip) { Ok(()) } else { Err(Refused::Private) }
    }

    async fn lookup(&self, name: &str) -> Result<Vec<IpAddr>, Refused> {
        let found = self.resolver.lookup_ip(name).await.map_err(|_| Refused::Unresolved)?;
        let addrs: Vec<IpAddr> = found.iter().collect();
        if addrs.is_empty() { Err(Refused::Unresolved) } else { Ok(addrs) }
    }

    /// The addresses a connection to `name` may use: the public ones it resolves to (all of
    /// them if private ones are allowed). An error when none is left.
    pub async fn connectable(&self, name: &str) -> Result<Vec<IpAddr>, Refused> {
        if is_local_name(name) && !self.allow_private {
            return Err(Refused::LocalName);
        }
        let addrs = self.lookup(name).await?;
        let kept: Vec<IpAddr> = addrs.into_iter().filter(|ip| self.allow_private || self.is_public(*ip)).collect();
        if kept.is_empty() { Err(Refused::Private) } else { Ok(kept) }
    }
}

impl reqwest::dns::Resolve for Guard {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.clone();
        Box::pin(async move {
            match guard.connectable(name.as_str()).await {
                Ok(addrs) => {
                    let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter().map(|ip| SocketAddr::new(ip, 0)));
                    Ok(addrs)
                }
                Err(e) => {
                    tracing::debug!(host = name.as_str(), error = %e, "outbound connection refused");
                    Err(Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(c: &ResolverConfig) -> Vec<String> {
        c.name_servers().iter().map(|n| format!("{:?} {}", n.protocol, n.socket_addr)).collect()
    }

    #[test]
    fn without_a_name_server_the_local_host_is_asked() {
        let local = ["Udp 127.0.0.1:53", "Tcp 127.0.0.1:53"];
        assert_eq!(names(&system_config(Ok(b"search example.com\n".to_vec())).0), local);
        assert_eq!(names(&system_config(Err(std::io::ErrorKind::NotFound.into())).0), local);
        let named = system_config(Ok(b"nameserver 192.0.2.53\n".to_vec())).0;
        assert_eq!(names(&named), ["Udp 192.0.2.53:53", "Tcp 192.0.2.53:53"]);
    }
}
