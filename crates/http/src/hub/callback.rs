//! Callback safety (SPEC §10): which callback URLs are accepted, the one HTTP client that
//! talks to them, and how much of an answer is read.
//!
//! A hub makes requests to URLs strangers give it, so it must not become a way into the
//! network it runs in. Callbacks whose host resolves to a loopback, private, link-local,
//! multicast or otherwise non-global address are refused when the subscription is asked
//! for, and the client's resolver drops such addresses again at every connection (a name
//! may resolve differently later). Redirects are never followed (a public callback could
//! send the hub anywhere), every request has a connect and an overall timeout, and at most
//! [`MAX_ANSWER`] bytes of an answer are read.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use url::Url;

/// The most of a callback's answer that is read (SPEC §10: 64 KiB).
pub const MAX_ANSWER: usize = 64 << 10;
/// The longest callback URL accepted.
pub const MAX_URL: usize = 2048;
/// How long connecting to a callback may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `ip` is an address anyone on the Internet could reach: not loopback, private,
/// shared (CGNAT), link-local, multicast, broadcast, documentation or unspecified.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_unspecified()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || a >= 240)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        || first == 0x2001 && ip.segments()[1] == 0x0db8)
}

/// Checks a callback URL's form: `http` or `https`, a host, no credentials, no fragment.
pub fn parse(callback: &str) -> Result<Url, String> {
    if callback.len() > MAX_URL {
        return Err(format!("hub.callback is longer than {MAX_URL} bytes"));
    }
    let url = Url::parse(callback).map_err(|e| format!("hub.callback is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("hub.callback must be an http:// or https:// URL".into());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("hub.callback has no host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("hub.callback must not carry credentials".into());
    }
    if url.fragment().is_some() {
        return Err("hub.callback must not have a fragment".into());
    }
    Ok(url)
}

/// Resolves the callback's host and refuses it when any of its addresses is not public
/// (unless `allow_private`), or when it does not resolve.
pub async fn check_address(url: &Url, allow_private: bool) -> Result<(), String> {
    let host = url.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
    let port = url.port_or_known_default().unwrap_or(80);
    let addrs: Vec<SocketAddr> = match tokio::net::lookup_host((host, port)).await {
        Ok(a) => a.collect(),
        Err(_) => return Err("hub.callback's host does not resolve".into()),
    };
    if addrs.is_empty() {
        return Err("hub.callback's host does not resolve".into());
    }
    if !allow_private && addrs.iter().any(|a| !is_public(a.ip())) {
        return Err("hub.callback resolves to a private, loopback, link-local or multicast address".into());
    }
    Ok(())
}

/// Resolves names for the client, keeping only public addresses unless private ones are
/// allowed: the check of [`check_address`] again, at connection time.
struct PublicOnly {
    allow_private: bool,
}

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0))
                .await?
                .filter(|a| allow_private || is_public(a.ip()))
                .collect();
            if addrs.is_empty() {
                return Err("no public address".into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// The client every verification and delivery goes through.
pub fn client(allow_private: bool, timeout: Duration, max_per_host: usize) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT.min(timeout))
        .timeout(timeout)
        .pool_max_idle_per_host(max_per_host)
        .user_agent(concat!("smartfeeds-hub/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(Arc::new(PublicOnly { allow_private }))
        .build()
}

/// Reads at most [`MAX_ANSWER`] bytes of an answer's body; the rest is never read.
pub async fn bounded_body(mut res: reqwest::Response) -> Vec<u8> {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = res.chunk().await {
        let room = MAX_ANSWER - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= MAX_ANSWER {
            break;
        }
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_global_addresses_are_public() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn callback_urls_are_http_with_a_host() {
        assert!(parse("http://example.com/cb?x=1").is_ok());
        assert!(parse("https://example.com:8443/").is_ok());
        for bad in ["ftp://example.com/", "example.com/cb", "http://u:p@example.com/", "http://e.com/#f", ""] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse(&format!("http://e.com/{}", "a".repeat(MAX_URL))).is_err());
    }

    #[tokio::test]
    async fn private_callbacks_are_refused_unless_allowed() {
        let url = parse("http://127.0.0.1:9/cb").unwrap();
        assert!(check_address(&url, false).await.is_err());
        assert!(check_address(&url, true).await.is_ok());
        let url = parse("http://[::1]:9/cb").unwrap();
        assert!(check_address(&url, false).await.is_err());
    }
}
