//! The XML stream of a XEP-0114 link: connect, log in, read top-level elements, write
//! stanzas. Built on rxml (the parser xmpp-rs uses) and xso, directly.
//!
//! Why not tokio-xmpp's `xmlstream`: it parses with rxml's default options, whose 8 KiB
//! token limit makes one long attribute value a fatal parse error. Any user can send an iq
//! with a 100 KiB `node` attribute (servers forward stanzas up to 256 KiB and more), and the
//! whole link would drop with every request in it. And xso builds a `minidom::Element` with
//! one stack frame per level of nesting, so a deep enough stanza overflows the stack.
//!
//! Here the token limit is the largest stanza we accept, and every stanza is held to
//! [`Limits`]: past the byte or depth limit its content is dropped as it is read (the
//! parser stays in sync) and the reader reports [`Frame::Dropped`] with the stanza's
//! header, so an iq still gets its error reply and the link stays up.

use crate::stanza_parts::{STREAM_NS, ToParts, XmlBuf, attr, declaration, end, head_end, start};
use minidom::Element;
use minidom::tree_builder::TreeBuilder;
use rxml::RawEvent;
use rxml::WithOptions;
use rxml::parser::EventMetrics;
use std::io;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use xmpp_parsers::component::Handshake;
use xmpp_parsers::ns;

/// What one inbound stanza may be. Past either limit the stanza is reported, not built.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Bytes of one stanza on the wire; also the longest attribute value or name.
    pub max_stanza_bytes: usize,
    /// Levels of elements below the stanza element.
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_stanza_bytes: 1 << 20, max_depth: 128 }
    }
}

/// A stanza's name and routing attributes, kept while its body is dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// `iq`, `message`, `presence`, or whatever the element is called.
    pub name: String,
    pub type_: Option<String>,
    pub id: Option<String>,
    pub from: Option<String>,
}

impl Header {
    /// The header of a built element.
    pub fn of_element(el: &Element) -> Header {
        let attr = |a: &str| el.attr(a).map(String::from);
        Header { name: el.name().to_string(), type_: attr("type"), id: attr("id"), from: attr("from") }
    }
}

/// What one read gives.
#[derive(Debug)]
pub enum Frame {
    /// A complete top-level element: a stanza, `<handshake/>` or `<stream:error/>`.
    Element(Element),
    /// A stanza that broke a [`Limits`] limit (`over_limit`), or was not namespace-well-formed;
    /// its body was dropped as it was read, and the stream goes on.
    Dropped { header: Header, why: String, over_limit: bool },
    /// The stream is over: the server's footer, end of file, an I/O or XML error.
    End(String),
}

/// The stanza being read.
struct Current {
    header: Header,
    /// Still inside the stanza's own start tag, whose attributes make the header.
    in_head: bool,
    /// Levels open, the stanza element included.
    depth: usize,
    bytes: usize,
    /// Its events go to the tree; false once it is being dropped.
    building: bool,
    /// The tree has been given a start tag whose end (`>`) it has not seen yet.
    tag_open: bool,
    /// Why it is dropped, and whether for a limit.
    dropped: Option<(String, bool)>,
}

/// The reading half. `next` is cancel-safe: all progress lives in `self`, so it may sit in a
/// `select!` beside other branches.
///
/// rxml's raw parser is linear in the nesting depth, where its namespace-resolving parser
/// looks each element's namespace up through all open levels (0.4 s of CPU for one 256 KiB
/// stanza of nested elements). Namespaces are resolved by minidom's `TreeBuilder` instead,
/// fed only what is within the limits: a stanza over a limit is closed off where it stands
/// and discarded, and after a stanza the builder refuses (an undeclared prefix) a new
/// builder starts from the stream header, so nothing of a bad stanza stays behind.
pub struct Reader<R = OwnedReadHalf> {
    parser: rxml::AsyncRawReader<BufReader<R>>,
    limits: Limits,
    /// The stream header's events (start tag and attributes), to start a builder from.
    root: Vec<RawEvent>,
    /// The stream header is complete.
    open: bool,
    /// The stream's tree: its root element, and below it the stanza being built.
    tree: TreeBuilder,
    current: Option<Current>,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    /// A reader of `io`, which must start with the server's stream header.
    pub fn new(io: R, limits: Limits) -> Reader<R> {
        let options = rxml::Options { max_token_length: limits.max_stanza_bytes, ..rxml::Options::default() };
        let parser =
            rxml::AsyncRawReader::wrap(BufReader::with_capacity(64 * 1024, io), rxml::RawParser::with_options(options));
        Reader { parser, limits, root: Vec::new(), open: false, tree: TreeBuilder::new(), current: None }
    }

    /// The stream header's `id` (empty if it has none), once the header is complete.
    fn stream_id(&self) -> Option<String> {
        if !self.open {
            return None;
        }
        let id = self.root.iter().find_map(|ev| match ev {
            RawEvent::Attribute(_, (None, name), value) if name.as_str() == "id" => Some(value.to_string()),
            _ => None,
        });
        Some(id.unwrap_or_default())
    }

    /// The next top-level element of the stream, after its header.
    pub async fn next(&mut self) -> Frame {
        loop {
            // Whitespace keepalives between stanzas are passed on at once, not gathered.
            let between = self.current.is_none();
            self.parser.parser_mut().set_text_buffering(!between);
            let event = match self.parser.read().await {
                Ok(Some(event)) => event,
                Ok(None) => return Frame::End("the server closed the connection".into()),
                Err(e) => return Frame::End(format!("read failed: {e}")),
            };
            if let Some(frame) = self.step(event) {
                return frame;
            }
        }
    }

    /// Advances by one event; a frame when a stanza (or the stream) is complete.
    fn step(&mut self, event: RawEvent) -> Option<Frame> {
        if !self.open {
            return self.header_event(event);
        }
        let Some(cur) = self.current.as_mut() else {
            return match event {
                RawEvent::XmlDeclaration(..) => None,
                RawEvent::Text(_, text) if xso::is_xml_whitespace(text.as_bytes()) => None,
                RawEvent::Text(..) => Some(Frame::End("text between stanzas".into())),
                RawEvent::ElementFoot(_) => Some(Frame::End("the server closed the stream".into())),
                RawEvent::ElementHeadOpen(_, (_, ref name)) => {
                    self.current = Some(Current {
                        header: Header { name: name.to_string(), ..Header::default() },
                        in_head: true,
                        depth: 0,
                        bytes: 0,
                        building: true,
                        tag_open: false,
                        dropped: None,
                    });
                    self.step(event)
                }
                RawEvent::Attribute(..) | RawEvent::ElementHeadClose(_) => {
                    Some(Frame::End("an attribute outside a start tag".into()))
                }
            };
        };
        cur.bytes += event.metrics().len();
        match &event {
            RawEvent::ElementHeadOpen(..) => cur.depth += 1,
            RawEvent::ElementFoot(_) => cur.depth -= 1,
            RawEvent::Attribute(_, (None, name), value) if cur.in_head && cur.depth == 1 => {
                let slot = match name.as_str() {
                    "type" => &mut cur.header.type_,
                    "id" => &mut cur.header.id,
                    "from" => &mut cur.header.from,
                    _ => &mut None,
                };
                *slot = Some(value.to_string());
            }
            RawEvent::ElementHeadClose(_) if cur.depth == 1 => cur.in_head = false,
            _ => {}
        }
        if cur.building {
            let (opens, closes) =
                (matches!(event, RawEvent::ElementHeadOpen(..)), matches!(event, RawEvent::ElementHeadClose(_)));
            let refused = if cur.bytes > self.limits.max_stanza_bytes {
                Some((format!("larger than {} bytes", self.limits.max_stanza_bytes), true))
            } else if cur.depth > self.limits.max_depth + 1 {
                Some((format!("nested more than {} levels deep", self.limits.max_depth), true))
            } else {
                match self.tree.process_event(event) {
                    Ok(()) => {
                        cur.tag_open = (cur.tag_open || opens) && !closes;
                        None
                    }
                    Err(e) => Some((e.to_string(), false)),
                }
            };
            if let Some(why) = refused {
                let limit = why.1;
                cur.building = false;
                cur.dropped = Some(why);
                if limit {
                    // Close what the builder holds of the stanza and throw it away.
                    let zero = EventMetrics::zero();
                    if cur.tag_open {
                        let _ = self.tree.process_event(RawEvent::ElementHeadClose(zero));
                    }
                    while self.tree.depth() > 1 {
                        let _ = self.tree.process_event(RawEvent::ElementFoot(zero));
                    }
                    let _ = self.tree.unshift_child();
                } else {
                    // The builder's state is not to be trusted after an error.
                    match tree_of(&self.root) {
                        Some(tree) => self.tree = tree,
                        None => return Some(Frame::End("the stream header no longer builds".into())),
                    }
                }
            }
        }
        if cur.depth > 0 {
            return None;
        }
        let cur = self.current.take()?;
        if cur.building {
            return match self.tree.unshift_child() {
                Some(element) => Some(Frame::Element(element)),
                None => Some(Frame::End("a stanza that built to nothing".into())),
            };
        }
        let (why, over_limit) = cur.dropped.unwrap_or_else(|| ("dropped".into(), false));
        Some(Frame::Dropped { header: cur.header, why, over_limit })
    }

    /// The stream header, `<stream:stream …>`, kept in `root`.
    fn header_event(&mut self, event: RawEvent) -> Option<Frame> {
        match event {
            RawEvent::XmlDeclaration(..) => None,
            RawEvent::Text(_, ref text) if xso::is_xml_whitespace(text.as_bytes()) => None,
            RawEvent::ElementHeadOpen(_, (_, ref name)) if self.root.is_empty() && name.as_str() == "stream" => {
                self.root.push(event);
                None
            }
            RawEvent::Attribute(..) if !self.root.is_empty() => {
                self.root.push(event);
                None
            }
            RawEvent::ElementHeadClose(_) if !self.root.is_empty() => match tree_of(&self.root) {
                Some(tree) => {
                    self.tree = tree;
                    self.open = true;
                    None
                }
                None => Some(Frame::End("the stream header does not parse".into())),
            },
            other => Some(Frame::End(format!("expected a stream header, got {other:?}"))),
        }
    }
}

/// A builder holding only the stream's root element, built from the header's events.
fn tree_of(root: &[RawEvent]) -> Option<TreeBuilder> {
    let mut tree = TreeBuilder::new();
    for event in root.iter().cloned().chain([RawEvent::ElementHeadClose(EventMetrics::zero())]) {
        tree.process_event(event).ok()?;
    }
    Some(tree)
}

/// The writing half: stanzas are encoded into a buffer, and written out by [`Writer::flush`].
pub struct Writer {
    io: OwnedWriteHalf,
    buf: XmlBuf,
}

impl Writer {
    fn new(io: OwnedWriteHalf) -> Writer {
        Writer { io, buf: XmlBuf::in_component_stream(64 * 1024) }
    }

    /// Encodes the stream header, `<stream:stream to=…>`; [`Writer::close`] ends it.
    fn header(&mut self, to: &str) -> io::Result<()> {
        let parts = [
            declaration(),
            start(STREAM_NS, rxml::xml_ncname!("stream")),
            attr(rxml::xml_ncname!("to"), to),
            head_end(),
        ];
        parts.into_iter().try_for_each(|p| self.buf.put_part(p))
    }

    /// Encodes `x` into the buffer. On error nothing of it stays there.
    pub fn feed<T: ToParts + ?Sized>(&mut self, x: &T) -> io::Result<()> {
        self.buf.put(x)
    }

    /// Bytes encoded and not yet written.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Writes out everything encoded so far.
    pub async fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.io.write_all(self.buf.bytes()).await?;
            self.buf.clear();
        }
        Ok(())
    }

    /// The socket, for a caller that writes stanza text of its own (after a flush).
    pub fn into_inner(self) -> OwnedWriteHalf {
        self.io
    }

    /// Writes what is buffered and the stream footer, and shuts down our sending side; the
    /// server then closes its side (read on until [`Frame::End`] to see what it still sent).
    pub async fn close(&mut self) -> io::Result<()> {
        self.buf.put_part(end())?;
        self.flush().await?;
        self.io.shutdown().await
    }
}

/// Why a login failed; each says what an operator checks.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("no login within {0:?}")]
    Timeout(Duration),
    /// The TCP connection could not be made (server down, wrong port).
    #[error("connect to {addr}: {err}")]
    Connect { addr: String, err: io::Error },
    /// Writing to or reading from the server failed mid-login.
    #[error("{what}: {err}")]
    Io { what: &'static str, err: io::Error },
    /// The server ended the stream, or sent something that is not XMPP, before its header.
    #[error("{0}")]
    Ended(String),
    #[error("the server's stream header has no id")]
    NoStreamId,
    /// A `<stream:error/>` instead of a handshake: usually a wrong secret or a second
    /// connection for the same domain.
    #[error("the server refused us: {condition} (wrong secret, or {domain} already connected?)")]
    Refused { condition: String, domain: String },
    #[error("expected <handshake/>, got {0}")]
    Unexpected(String),
}

/// Connects to `addr` (`ip:port`) as the component `domain` and logs in with `secret`
/// (XEP-0114 §3), within `timeout`.
pub async fn connect(
    addr: &str,
    domain: &str,
    secret: &str,
    limits: Limits,
    timeout: Duration,
) -> Result<(Reader, Writer), ConnectError> {
    tokio::time::timeout(timeout, login(addr, domain, secret, limits))
        .await
        .map_err(|_| ConnectError::Timeout(timeout))?
}

async fn login(addr: &str, domain: &str, secret: &str, limits: Limits) -> Result<(Reader, Writer), ConnectError> {
    let connect = |err| ConnectError::Connect { addr: addr.to_string(), err };
    let io = |what| move |err| ConnectError::Io { what, err };
    let tcp = TcpStream::connect(addr).await.map_err(connect)?;
    tcp.set_nodelay(true).map_err(connect)?;
    let (r, w) = tcp.into_split();
    let (mut reader, mut writer) = (Reader::new(r, limits), Writer::new(w));
    writer.header(domain).map_err(io("stream header"))?;
    writer.flush().await.map_err(io("write"))?;
    let stream_id = loop {
        if let Some(id) = reader.stream_id() {
            break id;
        }
        let event = match reader.parser.read().await {
            Ok(Some(event)) => event,
            Ok(None) => {
                return Err(ConnectError::Ended("the server closed the connection before its stream header".into()));
            }
            Err(e) => return Err(ConnectError::Ended(format!("reading the stream header: {e}"))),
        };
        if let Some(Frame::End(why)) = reader.step(event) {
            return Err(ConnectError::Ended(why));
        }
    };
    if stream_id.is_empty() {
        return Err(ConnectError::NoStreamId);
    }
    writer.feed(&Handshake::from_stream_id_and_password(stream_id, secret)).map_err(io("handshake"))?;
    writer.flush().await.map_err(io("write"))?;
    match reader.next().await {
        Frame::Element(el) if el.is("handshake", ns::COMPONENT) => Ok((reader, writer)),
        Frame::Element(el) if el.is("error", STREAM_NS) => {
            Err(ConnectError::Refused { condition: stream_error(&el), domain: domain.to_string() })
        }
        Frame::Element(el) => Err(ConnectError::Unexpected(format!("<{}>", el.name()))),
        Frame::Dropped { header, .. } => Err(ConnectError::Unexpected(format!("an unreadable <{}>", header.name))),
        Frame::End(why) => Err(ConnectError::Ended(format!("handshake refused (wrong secret or domain?): {why}"))),
    }
}

/// A `<stream:error/>` as one line: its condition and text.
pub fn stream_error(el: &Element) -> String {
    let condition = el.children().find(|c| c.name() != "text").map_or("undefined-condition", |c| c.name());
    match el.children().find(|c| c.name() == "text").map(|t| t.text()) {
        Some(text) if !text.is_empty() => format!("{condition}: {text}"),
        _ => condition.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    const HEAD: &str = "<?xml version='1.0'?><stream:stream xmlns='jabber:component:accept' xmlns:stream='http://etherx.jabber.org/streams' id='s1'>";

    async fn frames(limits: Limits, body: &str, n: usize) -> Vec<Frame> {
        let mut reader = Reader::new(std::io::Cursor::new(format!("{HEAD}{body}").into_bytes()), limits);
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(tokio::time::timeout(Duration::from_secs(5), reader.next()).await.expect("a frame"));
        }
        assert_eq!(reader.stream_id().as_deref(), Some("s1"));
        out
    }

    fn element(f: &Frame) -> &Element {
        match f {
            Frame::Element(el) => el,
            other => panic!("expected an element, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn stanzas_in_order_with_whitespace_between() {
        let body = "<iq type='get' id='a' from='x@y/z' to='c'><ping xmlns='urn:xmpp:ping'/></iq> \n\
                    <message to='c'><body>hi</body></message>";
        let f = frames(Limits::default(), body, 2).await;
        assert!(element(&f[0]).is("iq", ns::COMPONENT));
        assert_eq!(element(&f[0]).attr("id"), Some("a"));
        assert!(element(&f[0]).has_child("ping", "urn:xmpp:ping"));
        assert_eq!(element(&f[1]).name(), "message");
    }

    #[tokio::test]
    async fn a_long_attribute_is_read_whole() {
        let node = "n".repeat(300_000);
        let body = format!("<iq type='get' id='b' to='c'><pubsub xmlns='p'><items node='{node}'/></pubsub></iq>");
        let f = frames(Limits::default(), &body, 1).await;
        let items = element(&f[0]).get_child("pubsub", "p").and_then(|p| p.get_child("items", "p")).unwrap();
        assert_eq!(items.attr("node").map(str::len), Some(300_000));
    }

    #[tokio::test]
    async fn an_oversized_stanza_is_reported_with_its_header_and_the_stream_goes_on() {
        let limits = Limits { max_stanza_bytes: 4096, max_depth: 8 };
        let body = format!(
            "<iq type='set' id='big' from='a@b/c' to='c'><x xmlns='u'>{}</x></iq><iq type='get' id='after' to='c'><y xmlns='u'/></iq>",
            "t".repeat(10_000)
        );
        let f = frames(limits, &body, 2).await;
        match &f[0] {
            Frame::Dropped { header, why, over_limit: true } => {
                assert_eq!(header.name, "iq");
                assert_eq!(header.id.as_deref(), Some("big"));
                assert_eq!(header.from.as_deref(), Some("a@b/c"));
                assert_eq!(header.type_.as_deref(), Some("set"));
                assert!(why.contains("4096 bytes"), "{why}");
            }
            other => panic!("expected a dropped stanza, got {other:?}"),
        }
        assert_eq!(element(&f[1]).attr("id"), Some("after"));
    }

    #[tokio::test]
    async fn a_start_tag_over_the_limit_is_reported() {
        let limits = Limits { max_stanza_bytes: 4096, max_depth: 8 };
        let (a, b) = ("v".repeat(3000), "w".repeat(3000));
        let body = format!("<iq type='get' id='long' to='c' a='{a}' b='{b}'/><iq type='get' id='after' to='c'/>");
        let f = frames(limits, &body, 2).await;
        assert!(
            matches!(&f[0], Frame::Dropped { header, over_limit: true, .. } if header.id.as_deref() == Some("long")),
            "{:?}",
            f[0]
        );
        assert_eq!(element(&f[1]).attr("id"), Some("after"));
    }

    #[tokio::test]
    async fn deep_nesting_is_cut_at_the_limit() {
        let limits = Limits { max_stanza_bytes: 1 << 20, max_depth: 8 };
        let nest = |d: usize| format!("{}x{}", "<a>".repeat(d), "</a>".repeat(d));
        let body = format!(
            "<iq type='get' id='ok' to='c'><q xmlns='u'>{}</q></iq><iq type='get' id='deep' to='c'><q xmlns='u'>{}</q></iq>",
            nest(7),
            nest(100_000)
        );
        let f = frames(limits, &body, 2).await;
        assert_eq!(element(&f[0]).attr("id"), Some("ok"));
        match &f[1] {
            Frame::Dropped { header, why, over_limit: true } => {
                assert_eq!(header.id.as_deref(), Some("deep"));
                assert!(why.contains("8 levels"), "{why}");
            }
            other => panic!("expected a dropped stanza, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn an_undeclared_prefix_drops_that_stanza_only() {
        let body = "<iq type='get' id='bad' from='a@b' to='c'><x:q/></iq>\
                    <iq type='get' id='good' to='c'><q xmlns='u' xmlns:p='v'><p:r p:a='1'/></q></iq>";
        let f = frames(Limits::default(), body, 2).await;
        match &f[0] {
            Frame::Dropped { header, over_limit: false, .. } => assert_eq!(header.id.as_deref(), Some("bad")),
            other => panic!("expected a dropped stanza, got {other:?}"),
        }
        let r = element(&f[1]).get_child("q", "u").and_then(|q| q.get_child("r", "v")).expect("<p:r/> in v");
        assert_eq!(r.attr_ns("v", "a"), Some("1"));
    }

    #[tokio::test]
    async fn the_footer_ends_the_stream() {
        let f = frames(Limits::default(), "<iq type='get' id='a' to='c'/></stream:stream>", 2).await;
        assert_eq!(element(&f[0]).attr("id"), Some("a"));
        assert!(matches!(&f[1], Frame::End(why) if why.contains("closed the stream")));
    }

    #[tokio::test]
    async fn a_writer_encodes_stanzas_in_the_stream_namespace() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, server) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (_r, w) = client.unwrap().into_split();
        let mut writer = Writer::new(w);
        writer.header("feeds.localhost").unwrap();
        let iq = xmpp_parsers::iq::Iq::Result { from: None, to: None, id: "r1".into(), payload: None };
        writer.feed(&xmpp_parsers::stanza::Stanza::from(iq)).unwrap();
        assert!(writer.buffered() > 0);
        writer.close().await.unwrap();
        let mut text = String::new();
        server.unwrap().0.read_to_string(&mut text).await.unwrap();
        assert_eq!(
            text,
            "<?xml version='1.0' encoding='utf-8'?>\n<stream:stream xmlns='jabber:component:accept' \
             xmlns:stream='http://etherx.jabber.org/streams' to='feeds.localhost'>\
             <iq type='result' id='r1'></iq></stream:stream>"
        );
    }

    #[test]
    fn stream_errors_read_as_one_line() {
        let el: Element =
            "<error xmlns='http://etherx.jabber.org/streams'><conflict xmlns='urn:ietf:params:xml:ns:xmpp-streams'/>\
            <text xmlns='urn:ietf:params:xml:ns:xmpp-streams'>already connected</text></error>"
                .parse()
                .unwrap();
        assert_eq!(stream_error(&el), "conflict: already connected");
    }
}
