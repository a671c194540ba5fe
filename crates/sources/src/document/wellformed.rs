//! Whether an XML document is well-formed, and where it is not. feed-rs reads many broken
//! documents leniently (an unclosed root, a declaration after a comment), and so do feed
//! readers, flagging them (feedparser's `bozo`). A source is imported only from a
//! well-formed document: a broken one is refused with the reason and where it is, so the
//! fetch fails with a clear error in the log, is retried on its backoff, and the feed keeps
//! what it had rather than taking in what a guess made of the document.
//!
//! What is checked: the XML declaration first (a byte-order mark may come before it, nothing
//! else), tags that close in order, one root element with nothing but markup and blanks
//! around it, entity references that are predefined (or declared: a document type
//! declaration switches that check off), and element prefixes that are declared.

use quick_xml::events::Event;
use quick_xml::name::ResolveResult;

/// `Ok` when `bytes` (an XML document, in any ASCII-compatible encoding) is well-formed, else
/// why not, with the line and column.
pub fn check(bytes: &[u8]) -> Result<(), String> {
    let body = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let mut reader = quick_xml::NsReader::from_reader(body);
    let mut buf = Vec::new();
    let mut depth = 0usize;
    let mut roots = 0usize;
    let mut doctype = false;
    loop {
        let at = reader.buffer_position();
        let at = usize::try_from(at).unwrap_or(usize::MAX);
        let (ns, event) = match reader.read_resolved_event_into(&mut buf) {
            Ok(read) => read,
            Err(e) => {
                let pos = usize::try_from(reader.error_position()).unwrap_or(usize::MAX);
                return Err(format!("{e}, at {}", place(body, pos)));
            }
        };
        let unknown = |ns: &ResolveResult| match ns {
            ResolveResult::Unknown(prefix) => {
                Err(format!("the prefix {:?} is not declared, at {}", String::from_utf8_lossy(prefix), place(body, at)))
            }
            _ => Ok(()),
        };
        match event {
            Event::Eof => break,
            Event::Decl(_) if at > 0 => {
                return Err(format!("the XML declaration is not at the start of the document, at {}", place(body, at)));
            }
            Event::DocType(_) => doctype = true,
            Event::Start(_) => {
                unknown(&ns)?;
                if depth == 0 {
                    roots += 1;
                }
                depth += 1;
            }
            Event::Empty(_) => {
                unknown(&ns)?;
                if depth == 0 {
                    roots += 1;
                }
            }
            Event::End(_) => depth = depth.saturating_sub(1),
            Event::Text(t) if depth == 0 && !t.iter().all(u8::is_ascii_whitespace) => {
                return Err(format!("text outside the root element, at {}", place(body, at)));
            }
            Event::GeneralRef(r) if !doctype => {
                let name = String::from_utf8_lossy(&r);
                if !name.starts_with('#') && quick_xml::escape::resolve_xml_entity(&name).is_none() {
                    return Err(format!("the entity &{name}; is not declared, at {}", place(body, at)));
                }
            }
            _ => {}
        }
        if roots > 1 {
            return Err(format!("a second root element, at {}", place(body, at)));
        }
        buf.clear();
    }
    match (roots, depth) {
        (0, _) => Err("no root element".into()),
        (_, 0) => Ok(()),
        (_, open) => {
            Err(format!("the document ends with {open} element(s) still open, at {}", place(body, body.len())))
        }
    }
}

/// `line L, column C` (from 1) of byte offset `at`.
fn place(body: &[u8], at: usize) -> String {
    let before = &body[..at.min(body.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = before.len() - before.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1) + 1;
    format!("line {line}, column {column}")
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn well_formed_documents_pass() {
        for doc in [
            &b"<rss version='2.0'><channel><title>a &amp; b &#233;</title></channel></rss>"[..],
            b"\xef\xbb\xbf<?xml version='1.0' encoding='ISO-8859-1'?>\n<!-- c -->\n<rss>\xe9</rss>\n",
            b"<!DOCTYPE rss [<!ENTITY nbsp '&#160;'>]><rss>&nbsp;</rss>",
            b"<a:feed xmlns:a='http://www.w3.org/2005/Atom'><a:entry/></a:feed>",
            b"<feed><![CDATA[</feed>]]></feed>",
        ] {
            assert_eq!(check(doc), Ok(()), "{}", String::from_utf8_lossy(doc));
        }
    }

    #[test]
    fn broken_documents_say_what_and_where() {
        let cases: [(&[u8], &str); 8] = [
            (b"<rss version=\"2.0\">\n</rss", "line 2"),
            (
                b"\n\n<?xml version='1.0'?><rss/>",
                "declaration is not at the start of the document, at line 3, column 1",
            ),
            (b"<rss><channel></rss>", "line 1"),
            (b"<rss><item>", "still open"),
            (b"<rss><title>&nbsp;</title></rss>", "&nbsp; is not declared"),
            (b"<rss><itunes:author>x</itunes:author></rss>", "prefix \"itunes\" is not declared"),
            (b"<rss/><rss/>", "second root"),
            (b"", "no root element"),
        ];
        for (doc, want) in cases {
            let err = check(doc).expect_err(&String::from_utf8_lossy(doc));
            assert!(err.contains(want), "{err:?} should say {want:?}");
        }
    }
}
