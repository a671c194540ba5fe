//! Whose address a request comes from, behind trusted proxies (`[http] trusted_proxies`).
//!
//! Behind a TLS proxy every request arrives from the proxy's address, so every anonymous
//! client would share one rate bucket. When the peer is a trusted proxy, the client's own
//! address is taken from the one header the proxies write (`[http] proxy_header`:
//! `X-Forwarded-For`, or RFC 7239's `Forwarded`). Only that header: a proxy passes on the
//! other as the client sent it, so believing it would let a client choose its own address
//! (and drain another's rate bucket by naming it). Each proxy appends the address it got
//! the request from, so the list is read from the right, skipping trusted proxies: the
//! first address that is not one is the client (anything left of it could have been
//! written by the client itself). From a peer that is not trusted, both headers are
//! ignored: anyone can send them.

use axum::http::HeaderMap;
use ipnet::IpNet;
use std::net::IpAddr;

/// The header the trusted proxies write the client's address in (`[http] proxy_header`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProxyHeader {
    /// `X-Forwarded-For` (nginx's `$proxy_add_x_forwarded_for`, HAProxy's `forwardfor`).
    #[default]
    XForwardedFor,
    /// RFC 7239's `Forwarded: for=…`.
    Forwarded,
}

impl ProxyHeader {
    /// From the configuration's name of the header, case-insensitively.
    pub fn parse(name: &str) -> Result<ProxyHeader, String> {
        match name.to_ascii_lowercase().as_str() {
            "x-forwarded-for" => Ok(ProxyHeader::XForwardedFor),
            "forwarded" => Ok(ProxyHeader::Forwarded),
            _ => Err(format!("{name:?} is neither \"x-forwarded-for\" nor \"forwarded\"")),
        }
    }
}

/// The trusted proxies: addresses and networks, and the header they write.
#[derive(Clone, Debug, Default)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
    header: ProxyHeader,
}

impl TrustedProxies {
    /// From `[http] trusted_proxies`: each an address (`10.0.0.7`, `::1`) or a network in
    /// CIDR notation (`10.0.0.0/8`); the error names the first that is neither.
    pub fn parse<'a>(
        entries: impl IntoIterator<Item = &'a str>,
        header: ProxyHeader,
    ) -> Result<TrustedProxies, String> {
        let nets = entries
            .into_iter()
            .map(|e| {
                e.parse::<IpNet>()
                    .or_else(|_| e.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("{e:?} is neither an address nor a CIDR network"))
            })
            .collect::<Result<_, _>>()?;
        Ok(TrustedProxies { nets, header })
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|n| n.contains(&ip))
    }

    /// The client's address for a request from `peer` with `headers`.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if !self.trusts(peer) {
            return peer;
        }
        let hops = match self.header {
            ProxyHeader::XForwardedFor => x_forwarded_for(headers),
            ProxyHeader::Forwarded => forwarded_for(headers),
        };
        let mut client = peer;
        for hop in hops.into_iter().rev() {
            // A hop that is not an address (`unknown`, an obfuscated name) ends what can be
            // known: the last address before it stands.
            let Some(ip) = hop else { break };
            client = ip;
            if !self.trusts(ip) {
                break;
            }
        }
        client
    }
}

/// The `for=` addresses of every `Forwarded` header, in order (`None` for a value that is
/// not an address).
fn forwarded_for(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    headers
        .get_all("forwarded")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|element| {
            element.split(';').find_map(|pair| {
                let (name, value) = pair.split_once('=')?;
                name.trim().eq_ignore_ascii_case("for").then(|| node_addr(value.trim().trim_matches('"')))
            })
        })
        .collect()
}

/// The addresses of every `X-Forwarded-For` header, in order.
fn x_forwarded_for(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|hop| node_addr(hop.trim()))
        .collect()
}

/// An address as a forwarding header writes it: `192.0.2.1`, `192.0.2.1:4711`, `[2001:db8::1]`
/// or `[2001:db8::1]:4711`, or a bare IPv6 address.
fn node_addr(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse() {
        return Some(ip);
    }
    if let Some(rest) = s.strip_prefix('[') {
        return rest.split_once(']').and_then(|(ip, _)| ip.parse().ok());
    }
    s.rsplit_once(':').and_then(|(ip, port)| port.parse::<u16>().ok().and(ip.parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn forwarding_headers_count_from_trusted_peers_only() {
        let t = TrustedProxies::parse(["127.0.0.1", "10.0.0.0/8"], ProxyHeader::XForwardedFor).unwrap();
        let xff = headers(&[("x-forwarded-for", "203.0.113.9, 10.1.2.3")]);
        assert_eq!(t.client(ip("127.0.0.1"), &xff), ip("203.0.113.9"), "skips the trusted hop");
        assert_eq!(t.client(ip("192.0.2.1"), &xff), ip("192.0.2.1"), "an untrusted peer's headers are ignored");
        let spoofed = headers(&[("x-forwarded-for", "1.1.1.1, 203.0.113.9")]);
        assert_eq!(t.client(ip("127.0.0.1"), &spoofed), ip("203.0.113.9"), "the nearest untrusted hop");
        assert_eq!(t.client(ip("::ffff:127.0.0.1"), &xff), ip("203.0.113.9"), "IPv4 mapped into IPv6");
        assert_eq!(t.client(ip("127.0.0.1"), &HeaderMap::new()), ip("127.0.0.1"), "no header: the peer");
        assert!(TrustedProxies::parse(["10.0.0.0/33"], ProxyHeader::XForwardedFor).is_err());
        assert!(TrustedProxies::parse(["proxy.example"], ProxyHeader::XForwardedFor).is_err());
    }

    #[test]
    fn only_the_header_the_proxy_writes_is_believed() {
        // The proxy appends the client's address to X-Forwarded-For and passes on the
        // client's own Forwarded header: that one names whom the client chose.
        let xff = TrustedProxies::parse(["127.0.0.1"], ProxyHeader::XForwardedFor).unwrap();
        let spoofing = headers(&[("forwarded", "for=198.51.100.77"), ("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(xff.client(ip("127.0.0.1"), &spoofing), ip("203.0.113.9"));
        let only_forwarded = headers(&[("forwarded", "for=198.51.100.77")]);
        assert_eq!(xff.client(ip("127.0.0.1"), &only_forwarded), ip("127.0.0.1"), "no X-Forwarded-For: the proxy");
        // And the other way round, behind a proxy that writes RFC 7239's header.
        let fwd = TrustedProxies::parse(["10.0.0.0/8"], ProxyHeader::Forwarded).unwrap();
        let both = headers(&[
            ("forwarded", r#"for="[2001:db8::17]:4711";proto=https, for=10.0.0.2"#),
            ("x-forwarded-for", "198.51.100.1"),
        ]);
        assert_eq!(fwd.client(ip("10.9.9.9"), &both), ip("2001:db8::17"));
        let unknown = headers(&[("forwarded", "for=unknown, for=198.51.100.4:80")]);
        assert_eq!(fwd.client(ip("10.0.0.1"), &unknown), ip("198.51.100.4"));
        assert_eq!(ProxyHeader::parse("Forwarded"), Ok(ProxyHeader::Forwarded));
        assert!(ProxyHeader::parse("x-real-ip").is_err());
    }
}
