//! [`Client`]: the one way outbound requests are made.

use crate::guard::{Guard, Refused};
use crate::post::{Answer, PostFailed, PostTarget, Poster};
use bytes::Bytes;
use reqwest::header::HeaderMap;
use std::sync::Arc;
use std::time::Duration;
use url::Url;

/// The longest a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// An HTTP client whose connections go only where its [`Guard`] allows: names through the
/// guard's resolver, IP addresses checked before each request, no redirects followed, no
/// proxy.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    /// POSTs of ready bytes ([`Client::post_bytes`]), on hyper directly.
    poster: Poster,
    guard: Guard,
}

impl Client {
    /// A client for `guard`: each request may take `timeout` in all (connecting at most 5 s
    /// of it), and keeps at most `idle_per_host` idle connections per host.
    pub fn new(guard: Guard, timeout: Duration, idle_per_host: usize, user_agent: &str) -> reqwest::Result<Client> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT.min(timeout))
            .timeout(timeout)
            .pool_max_idle_per_host(idle_per_host)
            .user_agent(user_agent)
            .dns_resolver(Arc::new(guard.clone()))
            .build()?;
        let connect = CONNECT_TIMEOUT.min(timeout);
        let poster = Poster::new(guard.clone(), timeout, connect, idle_per_host, user_agent);
        Ok(Client { http, poster, guard })
    }

    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    /// A GET of `url`, or why it may not be made.
    pub fn get(&self, url: &str) -> Result<reqwest::RequestBuilder, Refused> {
        self.request(reqwest::Method::GET, url)
    }

    /// A POST to `url`, or why it may not be made.
    pub fn post(&self, url: &str) -> Result<reqwest::RequestBuilder, Refused> {
        self.request(reqwest::Method::POST, url)
    }

    /// Where [`post_bytes`](Self::post_bytes) may send to again and again, or why not.
    pub fn target(&self, url: &str) -> Result<PostTarget, Refused> {
        PostTarget::new(url, &self.guard)
    }

    /// POSTs `body` with `headers` to `to` (lighter than [`post`](Self::post): for a caller
    /// that sends ready bytes to the same URLs many times), reading at most `max` bytes of
    /// the answer's body.
    pub async fn post_bytes(
        &self,
        to: &PostTarget,
        headers: HeaderMap,
        body: Bytes,
        max: usize,
    ) -> Result<Answer, PostFailed> {
        self.poster.post(to, headers, body, max).await
    }

    fn request(&self, method: reqwest::Method, url: &str) -> Result<reqwest::RequestBuilder, Refused> {
        let url = Url::parse(url).map_err(|_| Refused::NotHttp)?;
        self.guard.check_host(&url)?;
        Ok(self.http.request(method, url))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OutboundConfig;

    fn client(allow_private: bool) -> Client {
        let guard = Guard::new(&OutboundConfig::default(), allow_private).unwrap();
        Client::new(guard, Duration::from_secs(1), 1, "test").unwrap()
    }

    #[tokio::test]
    async fn private_addresses_in_every_spelling_are_refused_before_connecting() {
        let c = client(false);
        for url in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0177.0.0.1/",
            "http://0x7f.0.0.1/",
            "http://0x7f000001/",
            "http://127.1/",
            "http://0/",
            "http://0.0.0.0/",
            "http://[::]/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://[64:ff9b::7f00:1]/",
            "http://10.0.0.1/",
            "http://169.254.169.254/latest/meta-data/",
        ] {
            assert_eq!(c.get(url).err(), Some(Refused::Private), "{url}");
        }
        for url in ["http://localhost/", "http://LOCALHOST./", "http://a.b.localhost:8080/"] {
            assert_eq!(c.get(url).err(), Some(Refused::LocalName), "{url}");
        }
        assert_eq!(c.get("file:///etc/passwd").err(), Some(Refused::NotHttp));
        assert!(c.get("http://93.184.216.34/").is_ok());
        assert!(client(true).get("http://127.0.0.1/").is_ok());
    }

    #[tokio::test]
    async fn the_check_resolves_names_and_refuses_local_ones() {
        let strict = Guard::new(&OutboundConfig::default(), false).unwrap();
        let url = Url::parse("http://127.0.0.1:9/cb").unwrap();
        assert_eq!(strict.check(&url).await, Err(Refused::Private));
        let lax = Guard::new(&OutboundConfig::default(), true).unwrap();
        assert_eq!(lax.check(&url).await, Ok(()));
        // /etc/hosts names localhost; a lax guard resolves it, a strict one refuses the name.
        let url = Url::parse("http://localhost:9/cb").unwrap();
        assert_eq!(strict.check(&url).await, Err(Refused::LocalName));
        assert_eq!(strict.connectable("localhost").await, Err(Refused::LocalName));
    }
}
