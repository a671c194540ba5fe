//! [`Guard`]: the resolver of outbound requests, and the check of their URLs.

use crate::address::{is_local_name, is_public};
use crate::config::OutboundConfig;
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig};
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
        let builder = if config.nameservers.is_empty() {
            TokioResolver::builder_tokio().map_err(|e| format!("the system's DNS configuration: {e}"))?
        } else {
            let mut c = ResolverConfig::new();
            for &addr in &config.nameservers {
                c.add_name_server(NameServerConfig::new(addr, Protocol::Udp));
                c.add_name_server(NameServerConfig::new(addr, Protocol::Tcp));
            }
            TokioResolver::builder_with_config(c, TokioConnectionProvider::default())
        };
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
