//! Reading stanzas as bytes: a splitter that finds where each top-level element of the
//! stream ends, and a few lookups (an element's name, an attribute, its children, its text)
//! on the raw bytes of one element.
//!
//! Why not a parser: in `fanout` the tool receives every notification the service sends,
//! tens of thousands a second, and must never be the bound of what it measures. Building a
//! namespace-resolved tree per stanza cost about 30 µs of CPU each; finding the few things
//! the tool checks (the recipient, the item id, three SHIM headers) in the bytes costs a
//! small fraction of that. The server in front has already checked the XML, so this trusts
//! it to be well-formed and only has to find element boundaries: tags, quoted attribute
//! values (which may hold `>`), comments, CDATA sections and processing instructions.
//! Elements are matched by their local name as written, without a prefix, which is how
//! every service and server measured here writes them; namespaces are compared where the
//! element declares one.

use std::borrow::Cow;

/// What the splitter found at the top level of the stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// One complete top-level element (a stanza, `<handshake/>`, `<stream:error/>`).
    Element(&'a [u8]),
    /// The stream's closing tag.
    StreamEnd,
}

/// Splits a stream's bytes, after its header, into top-level elements as they complete.
/// Feed it with [`Splitter::extend`], take elements with [`Splitter::next`].
#[derive(Default)]
pub struct Splitter {
    buf: Vec<u8>,
    /// The next byte to examine.
    pos: usize,
    /// Where the element being read starts (meaningful while `depth > 0`).
    start: usize,
    /// Elements open, the current top-level one included.
    depth: usize,
    /// Bytes before this are consumed and may be dropped.
    consumed: usize,
}

/// What one piece of markup at `<` is, once it is complete in the buffer.
enum Markup {
    Open {
        end: usize,
        empty: bool,
    },
    Close {
        end: usize,
    },
    /// A comment, CDATA section or processing instruction: skipped.
    Other {
        end: usize,
    },
}

impl Splitter {
    /// An empty splitter.
    pub fn new() -> Splitter {
        Splitter::default()
    }

    /// Appends bytes read from the stream. Drops what earlier pieces consumed first, so the
    /// buffer holds at most one incomplete element plus what was just read.
    pub fn extend(&mut self, data: &[u8]) {
        if self.consumed > 0 {
            self.buf.drain(..self.consumed);
            self.pos -= self.consumed;
            self.start = self.start.saturating_sub(self.consumed);
            self.consumed = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// The next complete top-level piece, or `None` until more bytes arrive.
    pub fn next(&mut self) -> Option<Piece<'_>> {
        loop {
            let at = self.pos + find(&self.buf[self.pos..], b'<')?;
            match markup(&self.buf, at)? {
                Markup::Other { end } => self.pos = end,
                Markup::Open { end, empty } => {
                    self.pos = end;
                    if self.depth == 0 {
                        self.start = at;
                    }
                    if !empty {
                        self.depth += 1;
                    } else if self.depth == 0 {
                        self.consumed = end;
                        return Some(Piece::Element(&self.buf[at..end]));
                    }
                }
                Markup::Close { end } => {
                    self.pos = end;
                    if self.depth == 0 {
                        self.consumed = end;
                        return Some(Piece::StreamEnd);
                    }
                    self.depth -= 1;
                    if self.depth == 0 {
                        self.consumed = end;
                        return Some(Piece::Element(&self.buf[self.start..end]));
                    }
                }
            }
        }
    }
}

fn find(hay: &[u8], b: u8) -> Option<usize> {
    hay.iter().position(|&c| c == b)
}

fn find_seq(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The end (one past `>`) of the start tag at `at`, skipping quoted values; `None` if it is
/// not complete yet.
fn tag_end(buf: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    let mut quote = 0u8;
    while i < buf.len() {
        let c = buf[i];
        if quote != 0 {
            if c == quote {
                quote = 0;
            }
        } else if c == b'"' || c == b'\'' {
            quote = c;
        } else if c == b'>' {
            return Some(i + 1);
        }
        i += 1;
    }
    None
}

/// The markup starting at `buf[at] == b'<'`, if it is complete in `buf`.
fn markup(buf: &[u8], at: usize) -> Option<Markup> {
    let rest = &buf[at..];
    let skip_to = |prefix: &[u8], terminator: &[u8]| -> Option<Option<Markup>> {
        if rest.len() < prefix.len() {
            // Too short to tell yet, unless it already differs from the prefix.
            return prefix.starts_with(rest).then_some(None);
        }
        if !rest.starts_with(prefix) {
            return None;
        }
        let end = find_seq(&rest[prefix.len()..], terminator).map(|i| at + prefix.len() + i + terminator.len());
        Some(end.map(|end| Markup::Other { end }))
    };
    match rest.get(1) {
        None => return None,
        Some(b'/') => return find(rest, b'>').map(|i| Markup::Close { end: at + i + 1 }),
        // Only `<!` and `<?` may start a comment, a CDATA section or an instruction.
        Some(b'!' | b'?') => {
            for (prefix, terminator) in [(&b"<!--"[..], &b"-->"[..]), (b"<![CDATA[", b"]]>"), (b"<?", b"?>")] {
                if let Some(m) = skip_to(prefix, terminator) {
                    return m;
                }
            }
        }
        Some(_) => {}
    }
    let end = tag_end(buf, at)?;
    Some(Markup::Open { end, empty: buf[end - 2] == b'/' })
}

/// The start tag of an element, `<` to `>`.
pub fn start_tag(el: &[u8]) -> &[u8] {
    tag_end(el, 0).map_or(el, |end| &el[..end])
}

/// An element's name as written (with its prefix, if any).
pub fn name(el: &[u8]) -> &[u8] {
    let tag = &el[1.min(el.len())..];
    let end = tag.iter().position(|&c| c.is_ascii_whitespace() || c == b'/' || c == b'>').unwrap_or(tag.len());
    &tag[..end]
}

/// The value of attribute `name` on the element's start tag, entities resolved.
pub fn attr<'a>(el: &'a [u8], name: &str) -> Option<Cow<'a, str>> {
    let tag = start_tag(el);
    let mut i = 1 + self::name(el).len();
    let name = name.as_bytes();
    loop {
        while i < tag.len() && tag[i].is_ascii_whitespace() {
            i += 1;
        }
        let key_start = i;
        while i < tag.len() && !(tag[i] == b'=' || tag[i].is_ascii_whitespace() || tag[i] == b'>' || tag[i] == b'/') {
            i += 1;
        }
        let key = &tag[key_start..i];
        if key.is_empty() {
            return None;
        }
        while i < tag.len() && (tag[i].is_ascii_whitespace() || tag[i] == b'=') {
            i += 1;
        }
        let quote = *tag.get(i)?;
        if quote != b'"' && quote != b'\'' {
            return None;
        }
        let value_start = i + 1;
        let value_end = value_start + find(&tag[value_start..], quote)?;
        if key == name {
            return Some(unescape(&tag[value_start..value_end]));
        }
        i = value_end + 1;
    }
}

/// The child elements of an element, in order.
pub fn children(el: &[u8]) -> Children<'_> {
    let start = start_tag(el).len();
    let empty = el.get(start.wrapping_sub(2)) == Some(&b'/');
    Children { el, pos: if empty { el.len() } else { start } }
}

/// See [`children`].
pub struct Children<'a> {
    el: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Children<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let mut depth = 0usize;
        let mut start = 0;
        loop {
            let at = self.pos + find(&self.el[self.pos..], b'<')?;
            match markup(self.el, at)? {
                Markup::Other { end } => self.pos = end,
                Markup::Open { end, empty } => {
                    self.pos = end;
                    if depth == 0 {
                        start = at;
                        if empty {
                            return Some(&self.el[at..end]);
                        }
                    }
                    if !empty {
                        depth += 1;
                    }
                }
                Markup::Close { end } => {
                    self.pos = end;
                    if depth == 0 {
                        // The parent's own closing tag.
                        self.pos = self.el.len();
                        return None;
                    }
                    depth -= 1;
                    if depth == 0 {
                        return Some(&self.el[start..end]);
                    }
                }
            }
        }
    }
}

/// The first child called `name` whose `xmlns`, if it declares one, is `ns`.
pub fn child<'a>(el: &'a [u8], name: &str, ns: &str) -> Option<&'a [u8]> {
    children(el).find(|c| self::name(c) == name.as_bytes() && attr(c, "xmlns").is_none_or(|x| x == ns))
}

/// The character data of an element without element children, entities resolved.
pub fn text(el: &[u8]) -> Cow<'_, str> {
    let start = start_tag(el).len();
    if el.get(start.wrapping_sub(2)) == Some(&b'/') {
        return Cow::Borrowed("");
    }
    let end = el.iter().rposition(|&c| c == b'<').unwrap_or(el.len()).max(start);
    unescape(&el[start..end])
}

/// Text with the five XML entities and character references resolved; anything else is
/// kept as written (the server has already checked the document).
pub fn unescape(raw: &[u8]) -> Cow<'_, str> {
    let s = String::from_utf8_lossy(raw);
    if !s.contains('&') {
        return s;
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = &s[..];
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let Some(semi) = rest.find(';') else { break };
        let entity = &rest[1..semi];
        let c = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "apos" => Some('\''),
            "quot" => Some('"'),
            _ => entity
                .strip_prefix("#x")
                .map(|h| u32::from_str_radix(h, 16))
                .or_else(|| entity.strip_prefix('#').map(str::parse::<u32>))
                .and_then(Result::ok)
                .and_then(char::from_u32),
        };
        match c {
            Some(c) => {
                out.push(c);
                rest = &rest[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(chunks: &[&str]) -> Vec<String> {
        let mut s = Splitter::new();
        let mut out = Vec::new();
        for chunk in chunks {
            s.extend(chunk.as_bytes());
            while let Some(p) = s.next() {
                out.push(match p {
                    Piece::Element(e) => String::from_utf8(e.to_vec()).unwrap(),
                    Piece::StreamEnd => "END".into(),
                });
            }
        }
        out
    }

    #[test]
    fn splits_top_level_elements_across_any_chunking() {
        let stream = "<handshake/> <message to='a' x=\"1>2\"><body>x<b/></body></message>\n\
                      <!-- c --><iq id='1'><q><![CDATA[</iq>]]></q></iq><?pi x?></stream:stream>";
        let want = vec![
            "<handshake/>".to_string(),
            "<message to='a' x=\"1>2\"><body>x<b/></body></message>".into(),
            "<iq id='1'><q><![CDATA[</iq>]]></q></iq>".into(),
            "END".into(),
        ];
        assert_eq!(pieces(&[stream]), want);
        // Every byte on its own: no element is split early or lost.
        let bytes: Vec<String> = stream.chars().map(String::from).collect();
        let refs: Vec<&str> = bytes.iter().map(String::as_str).collect();
        assert_eq!(pieces(&refs), want);
        // Every split point in two.
        for i in 1..stream.len() {
            assert_eq!(pieces(&[&stream[..i], &stream[i..]]), want, "split at {i}");
        }
    }

    #[test]
    fn reads_names_attributes_children_and_text() {
        let el = br#"<message to='sub1@b' type="headline" id='a&amp;b'><event xmlns='urn:e'><items node='n'><item id='x&lt;1'><entry><title>t</title></entry></item></items></event><headers xmlns='urn:h'><header name='A'>1&#x41;</header><header name="B"/></headers></message>"#;
        assert_eq!(name(el), b"message");
        assert_eq!(attr(el, "to").as_deref(), Some("sub1@b"));
        assert_eq!(attr(el, "type").as_deref(), Some("headline"));
        assert_eq!(attr(el, "id").as_deref(), Some("a&b"));
        assert_eq!(attr(el, "from"), None);
        let names: Vec<&[u8]> = children(el).map(name).collect();
        assert_eq!(names, vec![&b"event"[..], b"headers"]);
        let event = child(el, "event", "urn:e").unwrap();
        assert!(child(el, "event", "urn:other").is_none());
        let item = child(child(event, "items", "urn:e").unwrap(), "item", "urn:e").unwrap();
        assert_eq!(attr(item, "id").as_deref(), Some("x<1"));
        let headers: Vec<(String, String)> = children(child(el, "headers", "urn:h").unwrap())
            .map(|h| (attr(h, "name").unwrap().into_owned(), text(h).into_owned()))
            .collect();
        assert_eq!(headers, vec![("A".into(), "1A".into()), ("B".into(), String::new())]);
        assert_eq!(children(b"<x/>").count(), 0);
        assert_eq!(unescape(b"a &bogus; &#60; &"), "a &bogus; < &");
    }
}
