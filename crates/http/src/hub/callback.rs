//! Callback safety (SPEC §10): which callback URLs are accepted, the one HTTP client that
//! talks to them, and how much of an answer is read.
//!
//! A hub makes requests to URLs strangers give it, so it must not become a way into the
//! network it runs in. Where a callback may connect is the outbound policy's (the
//! `outbound` crate: names resolved and checked at each connection, IP addresses in every
//! spelling, no redirects followed, no proxy); a callback that is refused by it is refused
//! when the subscription is asked for. Every request has a connect and an overall timeout,
//! and at most [`MAX_ANSWER`] bytes of an answer are read.

use std::time::Duration;
use url::Url;

/// The most of a callback's answer that is read (SPEC §10: 64 KiB).
pub const MAX_ANSWER: usize = 64 << 10;
/// The longest callback URL accepted.
pub const MAX_URL: usize = 2048;
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

/// The client every verification and delivery goes through: callbacks may be private
/// addresses only when `allow_private`.
pub fn client(
    outbound: &outbound::OutboundConfig,
    allow_private: bool,
    timeout: Duration,
    max_per_host: usize,
) -> anyhow::Result<outbound::Client> {
    let guard = outbound::Guard::new(outbound, allow_private).map_err(anyhow::Error::msg)?;
    let agent = concat!("smartfeeds-hub/", env!("CARGO_PKG_VERSION"));
    Ok(outbound::Client::new(guard, timeout, max_per_host, agent)?)
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
    fn callback_urls_are_http_with_a_host() {
        assert!(parse("http://example.com/cb?x=1").is_ok());
        assert!(parse("https://example.com:8443/").is_ok());
        for bad in ["ftp://example.com/", "example.com/cb", "http://u:p@example.com/", "http://e.com/#f", ""] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse(&format!("http://e.com/{}", "a".repeat(MAX_URL))).is_err());
    }
}
