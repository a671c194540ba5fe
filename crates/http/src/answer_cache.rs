//! Answers about a feed validated by its generation ([`crate::generations`]), and the hot
//! ones kept as bytes.
//!
//! An answer (a page of a view, an item, an archive document) is a function of what was
//! asked (its *key*: the view's URL as asked, position, size, format, JSON-P callback) and
//! of the feed's items, which change only with the feed's generation. So its ETag is made
//! from the key and the generation, without reading an item: a client whose copy is
//! current gets its 304 for the price of a map look-up. The answers most asked for (first
//! pages, the recent archive document, whatever many clients poll) are kept here as bytes
//! with the generation they were made at, in a cache bounded by size: one read and one
//! rendering per change serves every reader until the next. An answer of an older
//! generation is never served; a change elsewhere (another feed) leaves it valid.
//!
//! What an answer is does not depend on who asks: the policy decides whether the
//! requester may have it (asked on every request, before the cache), never what it holds.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use feed::caches::{ByGeneration, Weighed};
use std::sync::{Arc, OnceLock};

/// What the cache may hold, bytes of bodies.
const CACHE_BYTES: u64 = 32 << 20;
/// Bodies larger than this are not kept (a page of the largest size still is).
const LARGEST_KEPT: u32 = 4 << 20;

/// One answer, ready to send.
pub struct Answer {
    pub etag: HeaderValue,
    pub content_type: HeaderValue,
    pub body: Bytes,
    /// A page without items (which a long-poll does not take for an answer).
    pub empty: bool,
    /// An archived document (which gets the archives' `Cache-Control`).
    pub archived: bool,
    /// The headers every response with this answer carries besides its type and ETag (the
    /// face's common ones, a function of the key): made by the first response, copied by
    /// the others.
    common: OnceLock<HeaderMap>,
}

/// An answer as its handler made it.
pub struct Made {
    pub content_type: &'static str,
    pub body: String,
    pub empty: bool,
    pub archived: bool,
}

impl Answer {
    /// The answer to a request with these headers: 304 when the client has it; with the
    /// `common` headers, made once per answer.
    pub fn respond(&self, headers: &HeaderMap, common: impl FnOnce() -> HeaderMap) -> Response {
        let mut head = self.common.get_or_init(common).clone();
        let (status, body) = if matches(headers, &self.etag) {
            (StatusCode::NOT_MODIFIED, Body::empty())
        } else {
            head.insert(header::CONTENT_TYPE, self.content_type.clone());
            (StatusCode::OK, Body::from(self.body.clone()))
        };
        head.insert(header::ETAG, self.etag.clone());
        let mut res = Response::new(body);
        *res.status_mut() = status;
        *res.headers_mut() = head;
        res
    }
}

/// The ETag of the answer to `key` at `generation`: the generation written out, so answers
/// of two generations never share one, and a hash of the key, so two answers of one URL in
/// two formats do not either.
pub fn etag(key: &str, generation: i64) -> HeaderValue {
    let mut h = crc32fast::Hasher::new();
    h.update(key.as_bytes());
    HeaderValue::from_str(&format!("\"g{generation:x}-{:08x}{:x}\"", h.finalize(), key.len()))
        .unwrap_or_else(|_| HeaderValue::from_static("\"\""))
}

/// Whether the request's `If-None-Match` names `etag`.
pub fn matches(headers: &HeaderMap, etag: &HeaderValue) -> bool {
    let Ok(tag) = etag.to_str() else { return false };
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| crate::formats::none_match(v, tag))
}

/// An answer weighs its body.
impl Weighed for Answer {
    fn weight(&self) -> u32 {
        u32::try_from(self.body.len()).unwrap_or(u32::MAX)
    }
}

/// Kept answers by key; see the module docs.
pub struct AnswerCache {
    kept: ByGeneration<String, Answer>,
}

impl Default for AnswerCache {
    fn default() -> Self {
        AnswerCache {
            kept: ByGeneration::new(CACHE_BYTES, LARGEST_KEPT, |k| u32::try_from(k.len()).unwrap_or(u32::MAX)),
        }
    }
}

impl AnswerCache {
    /// The kept answer to `key`, if it was made at `generation`.
    pub fn get(&self, key: &str, generation: i64) -> Option<Arc<Answer>> {
        self.kept.get(key, generation)
    }

    /// The answer to `key` at `generation` with this body, kept for the next requests.
    pub fn put(&self, key: String, generation: i64, made: Made) -> Arc<Answer> {
        let answer = Arc::new(Answer {
            etag: etag(&key, generation),
            content_type: HeaderValue::from_static(made.content_type),
            body: Bytes::from(made.body),
            empty: made.empty,
            archived: made.archived,
            common: OnceLock::new(),
        });
        self.kept.keep(key, generation, answer.clone());
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_serves_its_generation_only() {
        let cache = AnswerCache::default();
        let made =
            |body: &str| Made { content_type: "application/json", body: body.into(), empty: false, archived: false };
        let a = cache.put("k".into(), 7, made("{}"));
        assert!(cache.get("k", 7).is_some_and(|b| Arc::ptr_eq(&a, &b)));
        assert!(cache.get("k", 8).is_none(), "a newer generation");
        assert!(cache.get("other", 7).is_none());
        cache.put("k".into(), 6, made("{\"old\":1}"));
        assert!(cache.get("k", 7).is_some(), "an older answer does not replace a newer one");
        assert_ne!(etag("k", 7), etag("k", 8));
        assert_ne!(etag("k", 7), etag("k2", 7));
        let mut headers = HeaderMap::new();
        headers.insert(header::IF_NONE_MATCH, a.etag.clone());
        let common = || HeaderMap::from_iter([(header::CACHE_CONTROL, HeaderValue::from_static("max-age=1"))]);
        let not_modified = a.respond(&headers, common);
        assert_eq!(not_modified.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(not_modified.headers()[header::CACHE_CONTROL], "max-age=1");
        let ok = a.respond(&HeaderMap::new(), || panic!("made once"));
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.headers()[header::CACHE_CONTROL], "max-age=1");
        assert_eq!(ok.headers()[header::ETAG], a.etag);
    }
}
