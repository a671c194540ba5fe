//! A raw XEP-0114 component connection built for load: one reader task, one writer task,
//! and any number of requesters in between.
//!
//! Why not `tokio_xmpp::Component`, the test harness's `Connection` or the component's own
//! stream reader: they own the socket from one task, so a burst of replies and a burst of
//! requests take turns, and every stanza is built as a tree. Here the writer task batches
//! whatever text is queued into one `write_all` (stanzas are formatted by hand, see
//! `stanzas`), and the reader task splits what it reads into stanzas as bytes (`scan`):
//! iq replies are built as elements and handed straight to the waiting requester by id;
//! everything else (pushes) goes to an [`Inbox`] as bytes, so a notification costs a copy
//! and a few lookups, not a parse.
//!
//! Stanzas on the wire inherit the stream's default namespace, `jabber:component:accept`;
//! elements built from the server's stanzas carry it too. Only names and attributes are
//! compared.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use minidom::Element;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot};
use xmpp_parsers::component::Handshake;

use crate::scan::{self, Piece, Splitter};
use crate::stanzas::esc;

const NS_COMPONENT: &str = "jabber:component:accept";
pub const NS_STREAM: &str = "http://etherx.jabber.org/streams";
/// Bytes asked of the socket per read.
const READ_SIZE: usize = 256 * 1024;

/// How long connecting and the handshake may take.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(10);
/// The writer flushes once this much is queued, even if more is waiting.
const WRITE_BATCH: usize = 256 * 1024;

/// Why a request got no reply.
#[derive(Debug, Clone)]
pub enum IqError {
    /// No reply within the timeout.
    Timeout,
    /// The stream ended; holds the reason.
    Closed(String),
}

impl std::fmt::Display for IqError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IqError::Timeout => write!(f, "timeout"),
            IqError::Closed(why) => write!(f, "stream closed: {why}"),
        }
    }
}

enum Out {
    Text(String),
    /// Stanza text in two pieces: its own start, then bytes shared by many stanzas.
    Spliced(String, Arc<[u8]>),
    Close,
}

/// Answers the iq requests (get or set) that arrive, given as bytes: the answer's own
/// start and the bytes shared by every answer, or `None` for the default refusal.
pub type Answerer = Box<dyn Fn(&[u8]) -> Option<(String, Arc<[u8]>)> + Send + Sync>;

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Element>>>>;

/// A logged-in component stream. Cheap to share behind an `Arc`.
pub struct Link {
    domain: String,
    out: mpsc::UnboundedSender<Out>,
    pending: Pending,
    next_id: AtomicU64,
    closed: Arc<Mutex<Option<String>>>,
    /// Feeds the [`Inbox`] (kept so that more connections can feed it too).
    inbox: mpsc::UnboundedSender<Vec<u8>>,
    /// What answers iq requests, once set ([`Link::answer_with`]).
    answerer: Arc<OnceLock<Answerer>>,
}

/// Stanzas the server sent that are not replies to our iqs (messages, that is pushes, and
/// presences), as the bytes of each, read with `scan`.
pub struct Inbox(pub mpsc::UnboundedReceiver<Vec<u8>>);

impl Inbox {
    /// Drops whatever arrives from now on, so that strays do not pile up where nothing is
    /// expected.
    pub fn drain(mut self) {
        tokio::spawn(async move { while self.0.recv().await.is_some() {} });
    }
}

impl Link {
    /// Connects to `addr` as the component `domain` and logs in with `secret`.
    pub async fn connect(addr: SocketAddr, domain: &str, secret: &str) -> Result<(Arc<Link>, Inbox), String> {
        let (inbox_tx, inbox_rx) = mpsc::unbounded_channel();
        Ok((Link::connect_into(addr, domain, secret, inbox_tx).await?, Inbox(inbox_rx)))
    }

    /// Connects as [`connect`](Self::connect) does, with what the server sends going to
    /// an existing inbox (see [`inbox`](Self::inbox)): one more connection of the same
    /// component, whose messages the same reader counts.
    pub async fn connect_into(
        addr: SocketAddr,
        domain: &str,
        secret: &str,
        inbox: mpsc::UnboundedSender<Vec<u8>>,
    ) -> Result<Arc<Link>, String> {
        let (reader, w) = tokio::time::timeout(LOGIN_TIMEOUT, login(addr, domain, secret))
            .await
            .map_err(|_| format!("no login within {LOGIN_TIMEOUT:?}"))??;
        let (out, out_rx) = mpsc::unbounded_channel();
        let link = Arc::new(Link {
            domain: domain.to_string(),
            out,
            pending: Arc::default(),
            next_id: AtomicU64::new(0),
            closed: Arc::default(),
            inbox: inbox.clone(),
            answerer: Arc::default(),
        });
        tokio::spawn(write_loop(w, out_rx, link.closed.clone()));
        let answerer = link.answerer.clone();
        tokio::spawn(read_loop(reader, link.pending.clone(), inbox, link.out.clone(), link.closed.clone(), answerer));
        Ok(link)
    }

    /// Where this connection's messages go, for [`connect_into`](Self::connect_into).
    pub fn inbox(&self) -> mpsc::UnboundedSender<Vec<u8>> {
        self.inbox.clone()
    }

    /// Our domain.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// Why the stream ended, if it has.
    pub fn closed_reason(&self) -> Option<String> {
        self.closed.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Queues raw stanza text for writing.
    pub fn send_raw(&self, text: String) {
        let _ = self.out.send(Out::Text(text));
    }

    /// Sends `<iq type=kind from=from to=to id=…>payload</iq>` (`from` defaults to our domain;
    /// any JID of our domain may be used) and waits up to `timeout` for the `result` or
    /// `error` reply, which is returned as is.
    pub async fn iq(
        &self,
        kind: &str,
        from: Option<&str>,
        to: &str,
        payload: &str,
        timeout: Duration,
    ) -> Result<Element, IqError> {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).insert(n, tx);
        if let Some(why) = self.closed_reason() {
            self.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&n);
            return Err(IqError::Closed(why));
        }
        let from = esc(from.unwrap_or(&self.domain));
        self.send_raw(format!("<iq type='{kind}' id='l{n}' from='{from}' to='{}'>{payload}</iq>", esc(to)));
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_)) => Err(IqError::Closed(self.closed_reason().unwrap_or_else(|| "reader task gone".into()))),
            Err(_) => {
                self.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&n);
                Err(IqError::Timeout)
            }
        }
    }

    /// From now on, iq requests are answered by `answerer` (refused where it returns
    /// `None`). Only the first call counts.
    pub fn answer_with(&self, answerer: Answerer) {
        let _ = self.answerer.set(answerer);
    }

    /// Sends the stream footer after what is queued; the server then closes its side.
    pub fn close(&self) {
        let _ = self.out.send(Out::Close);
    }
}

fn set_closed(closed: &Mutex<Option<String>>, why: String) {
    let mut c = closed.lock().unwrap_or_else(|p| p.into_inner());
    if c.is_none() {
        *c = Some(why);
    }
}

/// Writes queued stanzas, as many per `write_all` as are waiting (up to [`WRITE_BATCH`]).
async fn write_loop(mut w: OwnedWriteHalf, mut rx: mpsc::UnboundedReceiver<Out>, closed: Arc<Mutex<Option<String>>>) {
    let mut buf: Vec<u8> = Vec::with_capacity(WRITE_BATCH);
    let mut closing = false;
    while !closing {
        match rx.recv().await {
            Some(Out::Close) | None => closing = true,
            Some(out) => append(&mut buf, out),
        }
        while !closing && buf.len() < WRITE_BATCH {
            match rx.try_recv() {
                Ok(Out::Close) => closing = true,
                Ok(out) => append(&mut buf, out),
                Err(_) => break,
            }
        }
        if closing {
            buf.extend_from_slice(b"</stream:stream>");
        }
        if let Err(e) = w.write_all(&buf).await {
            set_closed(&closed, format!("write failed: {e}"));
            return;
        }
        buf.clear();
    }
    let _ = w.shutdown().await;
}

/// Adds a stanza's text to what the writer will write.
fn append(buf: &mut Vec<u8>, out: Out) {
    match out {
        Out::Text(t) => buf.extend_from_slice(t.as_bytes()),
        Out::Spliced(head, shared) => {
            buf.extend_from_slice(head.as_bytes());
            buf.extend_from_slice(&shared);
        }
        Out::Close => {}
    }
}

/// Connects and logs in (XEP-0114 §3): our stream header, the server's (for its id), the
/// handshake, and `<handshake/>` back. Returns the reading half with whatever followed it.
async fn login(addr: SocketAddr, domain: &str, secret: &str) -> Result<(Reader, OwnedWriteHalf), String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| format!("connect to {addr}: {e}"))?;
    tcp.set_nodelay(true).map_err(|e| format!("connect to {addr}: {e}"))?;
    let (r, mut w) = tcp.into_split();
    let header = format!(
        "<?xml version='1.0'?><stream:stream xmlns='{NS_COMPONENT}' xmlns:stream='{NS_STREAM}' to='{}'>",
        esc(domain)
    );
    w.write_all(header.as_bytes()).await.map_err(|e| format!("write: {e}"))?;
    let mut reader = Reader::new(r, READ_SIZE);
    let stream_id = reader.stream_header().await?;
    let digest = Handshake::from_stream_id_and_password(stream_id, secret).data.unwrap_or_default();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    w.write_all(format!("<handshake>{hex}</handshake>").as_bytes()).await.map_err(|e| format!("write: {e}"))?;
    match reader.next().await {
        Ok(el) if scan::name(&el) == b"handshake" => Ok((reader, w)),
        Ok(el) if scan::name(&el) == b"stream:error" => {
            Err(format!("the server refused us: {} (wrong secret, or {domain} already connected?)", stream_error(&el)))
        }
        Ok(el) => Err(format!("expected <handshake/>, got <{}>", String::from_utf8_lossy(scan::name(&el)))),
        Err(why) => Err(format!("handshake refused (wrong secret or domain?): {why}")),
    }
}

/// The reading half of a stream: top-level elements as bytes.
pub struct Reader {
    io: OwnedReadHalf,
    pub splitter: Splitter,
    buf: Vec<u8>,
}

impl Reader {
    /// Reads `io`, `read_size` bytes at most per read.
    pub fn new(io: OwnedReadHalf, read_size: usize) -> Reader {
        Reader { io, splitter: Splitter::new(), buf: vec![0; read_size] }
    }

    /// Reads once more from the socket into the splitter.
    pub async fn fill(&mut self) -> Result<(), String> {
        match self.io.read(&mut self.buf).await {
            Ok(0) => Err("the server closed the connection".into()),
            Ok(n) => {
                self.splitter.extend(&self.buf[..n]);
                Ok(())
            }
            Err(e) => Err(format!("read failed: {e}")),
        }
    }

    /// Reads up to the end of the server's stream header; its `id`. What follows it goes
    /// to a new splitter (a restarted stream starts over).
    pub async fn stream_header(&mut self) -> Result<String, String> {
        let mut text = Vec::new();
        loop {
            let n = self.io.read(&mut self.buf).await.map_err(|e| format!("reading the stream header: {e}"))?;
            if n == 0 {
                return Err("the server closed the connection before its stream header".into());
            }
            text.extend_from_slice(&self.buf[..n]);
            let Some(at) = text.windows(14).position(|w| w == b"<stream:stream") else { continue };
            let tag = scan::start_tag(&text[at..]);
            if tag.last() != Some(&b'>') {
                continue;
            }
            let id = scan::attr(tag, "id").map(|id| id.into_owned()).unwrap_or_default();
            if id.is_empty() {
                return Err("the server's stream header has no id".into());
            }
            let after = at + tag.len();
            self.splitter = Splitter::new();
            self.splitter.extend(&text[after..]);
            return Ok(id);
        }
    }

    /// The next top-level element, or why the stream ended.
    pub async fn next(&mut self) -> Result<Vec<u8>, String> {
        loop {
            match self.splitter.next() {
                Some(Piece::Element(el)) => return Ok(el.to_vec()),
                Some(Piece::StreamEnd) => return Err("the server closed the stream".into()),
                None => self.fill().await?,
            }
        }
    }
}

/// An element of a stream whose default namespace is `ns`, built as a tree with the
/// stream's namespaces in scope.
pub fn build_in(el: &[u8], ns: &str) -> Result<Element, String> {
    let prefixes: BTreeMap<Option<String>, String> =
        [(None, ns.to_string()), (Some("stream".to_string()), NS_STREAM.to_string())].into();
    Element::from_reader_with_prefixes(el, prefixes).map_err(|e| e.to_string())
}

/// An element of our component stream, built as a tree.
fn build(el: &[u8]) -> Result<Element, String> {
    build_in(el, NS_COMPONENT)
}

/// A `<stream:error/>` as one line: its condition and text.
pub fn stream_error(el: &[u8]) -> String {
    let Ok(el) = build(el) else { return "(unreadable)".into() };
    let condition = el.children().find(|c| c.name() != "text").map_or("undefined-condition", |c| c.name());
    match el.children().find(|c| c.name() == "text").map(|t| t.text()) {
        Some(text) if !text.is_empty() => format!("{condition}: {text}"),
        _ => condition.to_string(),
    }
}

/// The `service-unavailable` answer to an iq request `el`: every iq get or set deserves
/// one reply, and the tool serves none.
pub fn refusal(el: &[u8]) -> String {
    let attr = |name| scan::attr(el, name).unwrap_or_default();
    format!(
        "<iq type='error' from='{}' to='{}' id='{}'><error type='cancel'><service-unavailable \
         xmlns='urn:ietf:params:xml:ns:xmpp-stanzas'/></error></iq>",
        esc(&attr("to")),
        esc(&attr("from")),
        esc(&attr("id"))
    )
}

/// Reads stanzas: iq replies go to their requester (built as elements), iq requests get
/// the answerer's answer or `service-unavailable` (every iq get/set deserves one reply), the
/// rest goes to the inbox as bytes.
async fn read_loop(
    mut reader: Reader,
    pending: Pending,
    inbox: mpsc::UnboundedSender<Vec<u8>>,
    out: mpsc::UnboundedSender<Out>,
    closed: Arc<Mutex<Option<String>>>,
    answerer: Arc<OnceLock<Answerer>>,
) {
    let mut stream_error_text = None;
    let why = loop {
        let Some(piece) = reader.splitter.next() else {
            match reader.fill().await {
                Ok(()) => continue,
                Err(why) => break why,
            }
        };
        let Piece::Element(el) = piece else { break "the server closed the stream".to_string() };
        match scan::name(el) {
            b"iq" => match scan::attr(el, "type").as_deref() {
                Some("result" | "error") => {
                    let id = scan::attr(el, "id");
                    let n = id.as_deref().and_then(|id| id.strip_prefix('l')).and_then(|n| n.parse::<u64>().ok());
                    let waiter = n.and_then(|n| pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&n));
                    if let (Some(waiter), Ok(el)) = (waiter, build(el)) {
                        let _ = waiter.send(el);
                    }
                }
                _ => {
                    let answer = match answerer.get().and_then(|a| a(el)) {
                        Some((head, shared)) => Out::Spliced(head, shared),
                        None => Out::Text(refusal(el)),
                    };
                    let _ = out.send(answer);
                }
            },
            b"stream:error" => stream_error_text = Some(stream_error(el)),
            _ => {
                let _ = inbox.send(el.to_vec());
            }
        }
    };
    let why = match stream_error_text {
        Some(e) => format!("{why} after <stream:error> {e}"),
        None => why,
    };
    set_closed(&closed, why);
    // Dropping the waiters wakes every requester with `Closed`.
    pending.lock().unwrap_or_else(|p| p.into_inner()).clear();
}
