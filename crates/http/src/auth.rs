//! Who an HTTP request is. `Authorization: Bearer TOKEN` names one of the configured tokens,
//! and the request acts as that token's JID under the same [`Policy::may`] as XMPP; no
//! header is anonymous (open feeds only). A token that matches none is refused at once, also
//! on open feeds (SPEC §9). Tokens are compared in constant time and never logged.
//!
//! [`Policy::may`]: feed::Policy::may

pub use super::actor::Actor;
use super::errors::ApiError;
use axum::http::HeaderMap;

/// The configured tokens.
pub struct Tokens {
    tokens: Vec<(Vec<u8>, String)>,
}

/// Equal in time that depends only on the lengths.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for (i, x) in a.iter().enumerate() {
        diff |= x ^ b.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

impl Tokens {
    /// `(token, bare JID)` pairs.
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> Tokens {
        Tokens { tokens: pairs.into_iter().map(|(t, j)| (t.into_bytes(), j)).collect() }
    }

    /// The JID of `token`; every configured token is compared, whichever matches.
    fn lookup(&self, token: &[u8]) -> Option<&str> {
        let mut found = None;
        for (t, jid) in &self.tokens {
            if ct_eq(t, token) {
                found = Some(jid.as_str());
            }
        }
        found
    }

    /// The actor of a request, from its `Authorization` header.
    pub fn actor(&self, headers: &HeaderMap) -> Result<Actor, ApiError> {
        let mut values = headers.get_all(axum::http::header::AUTHORIZATION).iter();
        let Some(value) = values.next() else { return Ok(Actor::Anonymous) };
        if values.next().is_some() {
            return Err(ApiError::bad_request("more than one Authorization header"));
        }
        let bytes = value.as_bytes();
        let token = match bytes.get(..7) {
            Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => bytes[7..].trim_ascii(),
            _ => return Err(ApiError::unauthorized("Authorization must be Bearer TOKEN")),
        };
        match self.lookup(token) {
            Some(jid) => Ok(Actor::Jid(jid.to_string())),
            None => Err(ApiError::unauthorized("unknown bearer token")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn tokens_name_their_jid_and_unknown_ones_are_refused() {
        let t = Tokens::new([("0123456789abcdef".to_string(), "bot@x".to_string())]);
        let mut h = HeaderMap::new();
        assert_eq!(t.actor(&h).unwrap(), Actor::Anonymous);
        h.insert("authorization", HeaderValue::from_static("Bearer 0123456789abcdef"));
        assert_eq!(t.actor(&h).unwrap(), Actor::Jid("bot@x".into()));
        h.insert("authorization", HeaderValue::from_static("bearer 0123456789abcdeX"));
        assert_eq!(t.actor(&h).unwrap_err().status, 401);
        h.insert("authorization", HeaderValue::from_static("Basic abc"));
        assert_eq!(t.actor(&h).unwrap_err().status, 401);
        assert!(ct_eq(b"abc", b"abc") && !ct_eq(b"abc", b"abd") && !ct_eq(b"abc", b"abcd") && !ct_eq(b"", b"a"));
    }
}
