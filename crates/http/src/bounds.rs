//! What every request must keep to before a handler reads it (SPEC §9; README "Bounds"): a body no
//! larger than the largest a route takes, refused on its announced `Content-Length` before
//! a byte of it is read (so a client waiting on `Expect: 100-continue` is never invited to
//! send it); path segments that decode strictly to UTF-8 without control characters and are
//! not `.` or `..`; and bodies read within a size and a time. The HTTP stack (hyper, see
//! [`serving`](super::serving)) has already bounded the head and refused odd framing.

use super::errors::{ApiError, quote};
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};
use std::time::Duration;

/// How long reading a request body may take (a slow-loris body is cut off with 408).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a percent-encoded string does not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Undecodable {
    /// A `%` not followed by two hex digits.
    Escape,
    /// The bytes are not UTF-8.
    Utf8,
}

impl Undecodable {
    pub fn says(self) -> &'static str {
        match self {
            Undecodable::Escape => "has a bad percent-escape (a % not followed by two hex digits)",
            Undecodable::Utf8 => "is not UTF-8",
        }
    }
}

/// Percent-decodes `raw` strictly: every `%` starts an escape of two hex digits, and the
/// result is UTF-8. (The usual decoders, percent-encoding's included, keep a bad escape as
/// written, so `id:%zz` would name an item "%zz" instead of being refused: the escapes are
/// checked first, then decoded by percent-encoding.)
pub fn percent_decode(raw: &str) -> Result<String, Undecodable> {
    let bytes = raw.as_bytes();
    let escapes_ok = bytes.iter().enumerate().filter(|(_, b)| **b == b'%').all(|(i, _)| {
        // Hex digits only: `from_str_radix` would take "+1".
        bytes.get(i + 1..i + 3).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    if !escapes_ok {
        return Err(Undecodable::Escape);
    }
    percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map(std::borrow::Cow::into_owned)
        .map_err(|_| Undecodable::Utf8)
}

/// The path's segments decode strictly, hold no control characters and no `.` or `..`
/// (also not when an encoded `/` splits one into several).
pub fn check_path(path: &str) -> Result<(), ApiError> {
    for raw in path.split('/') {
        let bad = |why: &str| ApiError::bad_request(format!("bad path segment {:?}: {why}", quote(raw)));
        // Most segments encode nothing: checked as they are, without a decoded copy.
        let segment = match raw.contains('%') {
            true => std::borrow::Cow::Owned(percent_decode(raw).map_err(|e| bad(e.says()))?),
            false => std::borrow::Cow::Borrowed(raw),
        };
        if segment.chars().any(char::is_control) {
            return Err(bad("holds control characters"));
        }
        if segment.split('/').any(|part| part == "." || part == "..") {
            return Err(bad("names . or .."));
        }
    }
    Ok(())
}

/// The deepest nesting an XML body may have (as on the XMPP link).
pub const MAX_XML_DEPTH: usize = 128;

/// An XML body is refused before it is built into a tree when it is nested deeper than
/// [`MAX_XML_DEPTH`] (building, checking and dropping a tree take one stack frame per
/// level, and resolving namespaces looks through every open level) or carries a DTD. rxml,
/// the parser, refuses every DTD, so no entity is ever declared, expanded or fetched (no
/// "billion laughs", no external entity); this names that refusal. Counted with rxml's raw
/// parser, which is linear in the depth; other errors are left for the real parse to name.
pub fn check_xml(xml: &[u8]) -> Result<(), ApiError> {
    use rxml::{Parse, RawEvent, RawParser};
    let refuse = |text: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid-payload", text);
    let mut parser = RawParser::new();
    let mut rest = xml;
    let mut depth = 0usize;
    loop {
        let event = match parser.parse(&mut rest, true) {
            Ok(Some(event)) => event,
            Ok(None) => return Ok(()),
            Err(_) if xml.windows(9).any(|w| w == b"<!DOCTYPE") => {
                return Err(refuse("a DTD is not accepted (nor any entity it would declare)".into()));
            }
            Err(_) => return Ok(()),
        };
        match event {
            RawEvent::ElementHeadOpen(..) => depth += 1,
            RawEvent::ElementFoot(..) => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > MAX_XML_DEPTH {
            return Err(refuse(format!("the body is nested more than {MAX_XML_DEPTH} levels deep")));
        }
    }
}

/// A body announced larger than `limit` bytes is refused before it is read.
pub fn check_announced(headers: &HeaderMap, limit: usize) -> Result<(), ApiError> {
    let announced = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    match announced {
        Some(n) if n > limit as u64 => Err(too_large(limit)),
        _ => Ok(()),
    }
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload-too-big", format!("the body is larger than {limit} bytes"))
}

/// Reads a body of at most `limit` bytes within [`BODY_TIMEOUT`]: 413 past the size (a
/// chunked body has announced none), 408 when it comes too slowly.
pub async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    match tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, limit)).await {
        Err(_) => Err(ApiError::new(StatusCode::REQUEST_TIMEOUT, "request-timeout", "the body came too slowly")),
        Ok(Err(_)) => Err(too_large(limit)),
        Ok(Ok(b)) => Ok(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_is_strict() {
        assert_eq!(percent_decode("a%20b%C3%A9+").as_deref(), Ok("a bé+"));
        for bad in ["%zz", "%", "%4", "a%g0", "%+1"] {
            assert_eq!(percent_decode(bad), Err(Undecodable::Escape), "{bad}");
        }
        assert_eq!(percent_decode("%FF%FE"), Err(Undecodable::Utf8));
    }

    #[test]
    fn depth_and_dtds() {
        let nested = |n: usize| format!("{}{}", "<a>".repeat(n), "</a>".repeat(n));
        assert!(check_xml(nested(MAX_XML_DEPTH).as_bytes()).is_ok());
        assert_eq!(check_xml(nested(MAX_XML_DEPTH + 1).as_bytes()).unwrap_err().status, 400);
        assert!(check_xml(b"<a><b/></a><a").is_ok(), "not XML: for the parse to refuse");
        let dtd = check_xml(b"<?xml version='1.0'?><!DOCTYPE a [<!ENTITY x 'y'>]><a>&x;</a>").unwrap_err();
        assert!(dtd.text.contains("DTD"), "{}", dtd.text);
    }

    #[test]
    fn paths() {
        for good in ["/feeds/news/items/a.b", "/feeds/n%C3%A9/items/..a", "/feeds/x/"] {
            assert!(check_path(good).is_ok(), "{good}");
        }
        for bad in [
            "/feeds/x/items/%zz",
            "/feeds/x/items/..",
            "/feeds/x/items/.",
            "/feeds/x/items/..%2F..%2Fetc",
            "/feeds/x/items/a%00",
            "/feeds/x/items/a%0Ab",
            "/feeds/%FF/",
        ] {
            assert_eq!(check_path(bad).unwrap_err().status, 400, "{bad}");
        }
    }
}
