//! One fetch of a document (SPEC §13): a conditional GET through the checked outbound
//! client, redirects followed by hand (at most [`MAX_REDIRECTS`], each target checked like
//! the first, since the client itself follows none), the body read up to `max_bytes`
//! (decoded, so a compressed bomb stops there too); or a local file read.

use crate::config::Location;
use outbound::{Client, Refused};
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED, LINK, LOCATION};
use url::Url;

/// What a fetch asks for: feed documents first (a smartfeeds feed URL then answers Atom
/// rather than its JSON collection), anything after them.
const ACCEPTED: &str = "application/atom+xml, application/rss+xml, application/feed+json;q=0.9, application/xml;q=0.8, text/xml;q=0.8, */*;q=0.5";

/// The most redirects one fetch follows.
pub const MAX_REDIRECTS: usize = 5;

/// What the last answer said to ask next time with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Validators {
    pub etag: Option<String>,
    pub last_modified: Option<String>,
}

/// How a fetch that worked ended.
#[derive(Debug)]
pub enum Answer {
    /// A document (boxed: it is much larger than the other answers).
    Document(Box<Got>),
    /// `304 Not Modified`.
    NotModified,
    /// `410 Gone`: the source is to be fetched no more.
    Gone,
}

/// A fetched document: its bytes, the URL it came from (after redirects: what relative
/// links resolve against), the hub and topic (`self`) its `Link` header names, its
/// validators.
#[derive(Debug)]
pub struct Got {
    pub body: Vec<u8>,
    pub url: Url,
    pub hub: Option<String>,
    pub topic: Option<String>,
    pub validators: Validators,
}

/// A fetch's answer, and where the source permanently moved if every redirect on the way
/// was permanent (`301`/`308`).
#[derive(Debug)]
pub struct Fetched {
    pub answer: Answer,
    pub moved: Option<Url>,
}

/// Why a fetch failed (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("the URL {0}")]
    Refused(#[from] Refused),
    #[error("answered {0}")]
    Status(u16),
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooManyRedirects,
    #[error("a redirect without a usable Location")]
    BadRedirect,
    #[error("the document is larger than sources.max_bytes ({0} bytes)")]
    TooLarge(u64),
    #[error("timed out")]
    Timeout,
    #[error("{0}")]
    Transport(String),
    #[error("cannot read the file: {0}")]
    File(String),
}

impl From<reqwest::Error> for FetchError {
    fn from(e: reqwest::Error) -> Self {
        if e.is_timeout() {
            return FetchError::Timeout;
        }
        FetchError::Transport(outbound::error_chain(&e))
    }
}

/// Fetches documents under one size limit.
#[derive(Clone)]
pub struct Fetcher {
    pub client: Client,
    pub max_bytes: u64,
}

impl Fetcher {
    /// Fetches `location`, conditionally when `validators` are given.
    pub async fn fetch(&self, location: &Location, validators: Option<&Validators>) -> Result<Fetched, FetchError> {
        match location {
            Location::Web(url) => self.get(url, validators).await,
            Location::File(path) => {
                let len = tokio::fs::metadata(path).await.map_err(|e| FetchError::File(e.to_string()))?.len();
                if len > self.max_bytes {
                    return Err(FetchError::TooLarge(self.max_bytes));
                }
                let body = tokio::fs::read(path).await.map_err(|e| FetchError::File(e.to_string()))?;
                // What relative links (prev-archive) resolve against: the file's absolute URL.
                let url = std::path::absolute(path)
                    .ok()
                    .and_then(|p| Url::from_file_path(p).ok())
                    .ok_or_else(|| FetchError::File("the path cannot be made absolute".into()))?;
                let got = Got { body, url, hub: None, topic: None, validators: Validators::default() };
                let answer = Answer::Document(Box::new(got));
                Ok(Fetched { answer, moved: None })
            }
        }
    }

    /// A GET of `url`, following redirects by hand.
    pub async fn get(&self, url: &Url, validators: Option<&Validators>) -> Result<Fetched, FetchError> {
        let mut url = url.clone();
        let mut moved = None;
        let mut permanent = true;
        for _ in 0..=MAX_REDIRECTS {
            let mut req = self.client.get(url.as_str())?.header(ACCEPT, ACCEPTED);
            if let Some(v) = validators {
                if let Some(etag) = &v.etag {
                    req = req.header(IF_NONE_MATCH, etag);
                }
                if let Some(lm) = &v.last_modified {
                    req = req.header(IF_MODIFIED_SINCE, lm);
                }
            }
            let mut resp = req.send().await?;
            let status = resp.status();
            if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
                let next = resp
                    .headers()
                    .get(LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .and_then(|l| url.join(l).ok())
                    .ok_or(FetchError::BadRedirect)?;
                permanent &= matches!(status, StatusCode::MOVED_PERMANENTLY | StatusCode::PERMANENT_REDIRECT);
                if permanent {
                    moved = Some(next.clone());
                }
                url = next;
                continue;
            }
            let answer = match status {
                StatusCode::NOT_MODIFIED => Answer::NotModified,
                StatusCode::GONE => Answer::Gone,
                s if s.is_success() => {
                    let header = |name| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
                    let validators = Validators { etag: header(ETAG), last_modified: header(LAST_MODIFIED) };
                    let links = || resp.headers().get_all(LINK).iter().filter_map(|v| v.to_str().ok());
                    let hub = links().find_map(|l| link_to(l, "hub"));
                    let topic = links().find_map(|l| link_to(l, "self"));
                    if resp.content_length().is_some_and(|n| n > self.max_bytes) {
                        return Err(FetchError::TooLarge(self.max_bytes));
                    }
                    let mut body = Vec::new();
                    while let Some(chunk) = resp.chunk().await? {
                        if (body.len() + chunk.len()) as u64 > self.max_bytes {
                            return Err(FetchError::TooLarge(self.max_bytes));
                        }
                        body.extend_from_slice(&chunk);
                    }
                    Answer::Document(Box::new(Got { body, url, hub, topic, validators }))
                }
                s => return Err(FetchError::Status(s.as_u16())),
            };
            return Ok(Fetched { answer, moved });
        }
        Err(FetchError::TooManyRedirects)
    }
}

/// The target of the link with relation `rel` in a `Link` header value, if it has one.
pub fn link_to(header: &str, rel: &str) -> Option<String> {
    header.split(',').find_map(|link| {
        let (target, params) = link.split_once(';')?;
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        let matches = params.split(';').any(|p| {
            let p = p.trim();
            p.strip_prefix("rel=")
                .is_some_and(|r| r.trim_matches('"').split_whitespace().any(|r| r.eq_ignore_ascii_case(rel)))
        });
        matches.then(|| target.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hub_is_found_among_links() {
        let header = r#"<https://h.example/>; rel="hub", <https://x/feed>; rel="self""#;
        assert_eq!(link_to(header, "hub").as_deref(), Some("https://h.example/"));
        assert_eq!(link_to(header, "self").as_deref(), Some("https://x/feed"));
        assert_eq!(
            link_to(r#"<https://x/feed>; rel="self", <https://h/>; rel=hub"#, "hub").as_deref(),
            Some("https://h/")
        );
        assert_eq!(link_to("<https://x/feed>; rel=\"self\"", "hub"), None);
        assert_eq!(link_to("garbage", "hub"), None);
    }
}
