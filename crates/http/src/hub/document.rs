//! What a delivery carries (SPEC §10): an Atom feed document made by the HTTP face's own
//! formatter (`http::formats::Doc`), with `fo:prev_cursor` added, and its signature.

use crate::formats::{Doc, esc};
use crate::rendered::Rendered;
use bytes::Bytes;
use feed::outbox::OutboxEntry;
use hmac::{Hmac, Mac};
use std::sync::{Arc, Mutex, PoisonError};

/// The Atom document of consecutive outbox rows of one view, oldest first: `fo:total` and
/// `fo:last_cursor` as after the last of them, `fo:prev_cursor` as before the first (absent
/// when the view was empty), so a subscriber that sees a `fo:prev_cursor` other than the
/// last cursor it holds knows it missed something and pulls from there.
pub fn atom(entries: &[OutboxEntry], topic: &str, hub: &str, title: &str) -> String {
    // Made once per delivered batch and shared by the view's subscriptions (see `deliver`).
    let items: Vec<_> = entries.iter().map(|e| Arc::new(Rendered::of(&e.item()))).collect();
    let cursors: Vec<_> = entries.iter().map(|e| e.last).collect();
    let total = entries.last().map_or(0, |e| e.count);
    let doc = Doc { url: topic, next: None, hub, title, total, items: &items, cursors: &cursors };
    let prev = match entries.first().and_then(|e| e.previous) {
        Some(c) => format!("<fo:prev_cursor>{}</fo:prev_cursor>", esc(&c.to_string())),
        None => String::new(),
    };
    doc.atom(&[("self", topic), ("hub", hub)], &prev)
}

/// One outbox read, shared by every subscription of its view that is at the same place,
/// and the documents made of it: one per topic spelling (subscribers of one view nearly
/// always spell it alike), so a change is written out once however many subscribe, and
/// each delivery only signs and sends.
pub struct Batch {
    pub entries: Vec<OutboxEntry>,
    /// Topic → document.
    documents: Mutex<Vec<(String, Bytes)>>,
}

impl Batch {
    pub fn new(entries: Vec<OutboxEntry>) -> Batch {
        Batch { entries, documents: Mutex::default() }
    }

    /// The document of the batch for `topic` (see [`atom`]), made on first use.
    pub fn document(&self, topic: &str, hub: &str, title: &str) -> Bytes {
        let mut docs = self.documents.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, d)) = docs.iter().find(|(t, _)| t == topic) {
            return d.clone();
        }
        let d = Bytes::from(atom(&self.entries, topic, hub, title));
        docs.push((topic.to_string(), d.clone()));
        d
    }
}

/// The hash of `X-Hub-Signature` (WebSub §7.1), named in the header as in `[hub] signature`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum Method {
    Sha1,
    #[default]
    Sha256,
    Sha384,
    Sha512,
}

impl TryFrom<String> for Method {
    type Error = String;

    fn try_from(name: String) -> Result<Method, String> {
        [Method::Sha1, Method::Sha256, Method::Sha384, Method::Sha512]
            .into_iter()
            .find(|m| m.as_str() == name)
            .ok_or_else(|| format!("signature {name:?} is not one of WebSub's: sha1, sha256, sha384 or sha512"))
    }
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Sha1 => "sha1",
            Method::Sha256 => "sha256",
            Method::Sha384 => "sha384",
            Method::Sha512 => "sha512",
        }
    }
}

/// `X-Hub-Signature`'s value: the method, `=`, and the hex HMAC of `body` under `secret`.
pub fn signature(method: Method, secret: &str, body: &[u8]) -> String {
    let key = secret.as_bytes();
    let digest = match method {
        Method::Sha1 => hmac(Hmac::<sha1::Sha1>::new_from_slice(key), body),
        Method::Sha256 => hmac(Hmac::<sha2::Sha256>::new_from_slice(key), body),
        Method::Sha384 => hmac(Hmac::<sha2::Sha384>::new_from_slice(key), body),
        Method::Sha512 => hmac(Hmac::<sha2::Sha512>::new_from_slice(key), body),
    };
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(method.as_str().len() + 1 + 2 * digest.len());
    out.push_str(method.as_str());
    out.push('=');
    for b in digest {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    }
    out
}

/// The HMAC of `body` with a keyed `mac`.
fn hmac(mac: Result<impl Mac, hmac::digest::InvalidLength>, body: &[u8]) -> Vec<u8> {
    let mut mac = mac.expect("HMAC takes keys of any length");
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use feed::{Cursor, Payload};

    #[test]
    fn signatures_match_known_vectors() {
        // RFC 2202 and RFC 4231, test case 2 of each.
        let (key, data) = ("Jefe", b"what do ya want for nothing?");
        assert_eq!(signature(Method::Sha1, key, data), "sha1=effcdf6ae5eb2fa2d27416d5f184df9c259a7c79");
        assert_eq!(
            signature(Method::Sha256, key, data),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            signature(Method::Sha384, key, data),
            "sha384=af45d2e376484031617f78d2b58a6b1b9c7ef464f5a01b47e42ec3736322445e\
             8e2240ca5e69e2c78b3239ecfab21649"
        );
        assert_eq!(
            signature(Method::Sha512, key, data),
            "sha512=164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea250554\
             9758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737"
        );
    }

    #[test]
    fn the_document_chains_its_cursors() {
        let row = |id: &str, prev: Option<Cursor>, last: Cursor, count| OutboxEntry {
            seq: 1,
            feed: 1,
            view: "f?order=modified".into(),
            item_id: id.into(),
            modified: 1_700_000_000_000,
            payload: Payload::Entry(r#"<entry xmlns="http://www.w3.org/2005/Atom"><title>x</title></entry>"#.into()),
            count,
            previous: prev,
            last,
            at: 0,
        };
        let (c1, c2, c3) = (Cursor { t: 1, o: 0, c: 1 }, Cursor { t: 2, o: 0, c: 2 }, Cursor { t: 3, o: 0, c: 3 });
        let doc =
            atom(&[row("a", Some(c1), c2, 2), row("b", Some(c2), c3, 3)], "http://h/feeds/f/", "http://h/hub", "F");
        assert!(doc.contains("<fo:prev_cursor>1_0_1</fo:prev_cursor>"), "{doc}");
        assert!(doc.contains("<fo:last_cursor>3_0_3</fo:last_cursor>") && doc.contains("<fo:total>3</fo:total>"));
        assert!(doc.find("<fo:id>a</fo:id>") < doc.find("<fo:id>b</fo:id>"), "in commit order");
        let first = atom(&[row("a", None, c1, 1)], "http://h/feeds/f/", "http://h/hub", "F");
        assert!(!first.contains("prev_cursor"), "absent when the view was empty");
    }
}
