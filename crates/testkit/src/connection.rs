//! The stanza pipe shared by the test [`Client`](super::client::Client) and the raw
//! [`Component`](super::component::Component): one tokio task owns the XML stream (writes
//! what the test sends, reads everything the server sends into a channel), and the test side
//! keeps what it has not asked for yet in an arrival-ordered queue, so waiting for an iq reply
//! never loses a message that arrived first.
//!
//! Stanzas are `minidom::Element`s in `jabber:client` on the test side; a component
//! connection translates to and from `jabber:component:accept` on the wire.

use std::collections::VecDeque;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use minidom::Element;
use tokio::io::BufStream;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_xmpp::xmlstream::{ReadError, Timeouts, XmlStream};

use super::xml::{NS_CLIENT, NS_STREAMS, rename_ns, set_attr, stanza_type, to_xml};

/// The XML stream type both helpers log in on.
pub(crate) type Stream = XmlStream<BufStream<TcpStream>, Element>;

/// Default wait for replies.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Stream timeouts: tests are never idle that long, so soft timeouts never matter.
pub(crate) fn timeouts() -> Timeouts {
    Timeouts { read_timeout: Duration::from_secs(3600), response_timeout: Duration::from_secs(3600) }
}

/// Reads one element during stream negotiation (before the driver task takes over).
pub(crate) async fn read_one(stream: &mut Stream, what: &str) -> Result<Element, String> {
    let deadline = Instant::now() + REPLY_TIMEOUT;
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => return Err(format!("timed out waiting for {what}")),
            Ok(Some(Ok(el))) if el.is("error", NS_STREAMS) => {
                return Err(format!("stream error while waiting for {what}: {}", describe_stream_error(&el)));
            }
            Ok(Some(Ok(el))) => return Ok(el),
            Ok(Some(Err(ReadError::SoftTimeout))) => continue,
            Ok(Some(Err(e))) => return Err(format!("{e} while waiting for {what}")),
            Ok(None) => return Err(format!("connection closed while waiting for {what}")),
        }
    }
}

/// Sends one element during stream negotiation.
pub(crate) async fn write_one(stream: &mut Stream, el: &Element) -> Result<(), String> {
    match tokio::time::timeout(REPLY_TIMEOUT, stream.send(el)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("write failed: {e}")),
        Err(_) => Err("write timed out".to_string()),
    }
}

fn describe_stream_error(el: &Element) -> String {
    let condition = el
        .children()
        .find(|c| c.name() != "text")
        .map(|c| c.name().to_string())
        .unwrap_or_else(|| "(no condition)".into());
    match el.children().find(|c| c.name() == "text") {
        Some(text) => format!("<stream:error> {condition}: {}", text.text()),
        None => format!("<stream:error> {condition}"),
    }
}

enum Command {
    Send(Element, oneshot::Sender<Result<(), String>>),
    Close(oneshot::Sender<()>),
}

enum Event {
    Stanza(Element),
    Closed(String),
}

/// A logged-in stream: send stanzas, wait for replies and pushes. See the module docs.
pub struct Connection {
    label: String,
    wire_ns: &'static str,
    default_from: Option<String>,
    commands: mpsc::UnboundedSender<Command>,
    events: mpsc::UnboundedReceiver<Event>,
    pending: VecDeque<Element>,
    closed: Option<String>,
    next_id: u64,
}

impl Connection {
    /// Takes over a negotiated stream. `label` names it in panic messages; `wire_ns` is the
    /// stanza namespace on the wire; `default_from` is set on sent stanzas without `from`.
    pub(crate) fn spawn(
        stream: Stream,
        label: String,
        wire_ns: &'static str,
        default_from: Option<String>,
    ) -> Connection {
        let (commands, command_rx) = mpsc::unbounded_channel();
        let (event_tx, events) = mpsc::unbounded_channel();
        tokio::spawn(drive(stream, command_rx, event_tx));
        Connection {
            label,
            wire_ns,
            default_from,
            commands,
            events,
            pending: VecDeque::new(),
            closed: None,
            next_id: 0,
        }
    }

    /// Who this is, for messages: the full JID of a client, the domain of a component.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// A stanza id unique on this connection.
    pub fn fresh_id(&mut self) -> String {
        self.next_id += 1;
        format!("t{}", self.next_id)
    }

    /// Sends a stanza and waits until it is written to the socket. Errors if the stream is
    /// gone.
    pub async fn try_send(&mut self, stanza: Element) -> Result<(), String> {
        let stanza = self.prepare(stanza);
        let (ack, done) = oneshot::channel();
        self.commands.send(Command::Send(stanza, ack)).map_err(|_| "connection task is gone".to_string())?;
        done.await.map_err(|_| "connection task is gone".to_string())?
    }

    /// Queues a stanza for writing without waiting for the write (pipelining, for load
    /// tools). Write errors surface later as the stream's close reason.
    pub fn queue(&mut self, stanza: Element) {
        let stanza = self.prepare(stanza);
        let (ack, _) = oneshot::channel();
        let _ = self.commands.send(Command::Send(stanza, ack));
    }

    fn prepare(&self, mut stanza: Element) -> Element {
        if let Some(from) = &self.default_from
            && stanza.attr("from").is_none()
        {
            set_attr(&mut stanza, "from", from);
        }
        if self.wire_ns != NS_CLIENT { rename_ns(&stanza, NS_CLIENT, self.wire_ns) } else { stanza }
    }

    /// Sends a stanza; panics if the stream is gone.
    pub async fn send(&mut self, stanza: Element) {
        let text = to_xml(&stanza);
        if let Err(e) = self.try_send(stanza).await {
            panic!("{}: cannot send {text}: {e}", self.label);
        }
    }

    /// Sends an iq (an `id` is added when missing) and returns the `result` or `error` iq
    /// with that id. Panics after [`REPLY_TIMEOUT`] or if the stream closes.
    pub async fn iq(&mut self, iq: Element) -> Element {
        self.iq_timeout(iq, REPLY_TIMEOUT).await
    }

    /// [`iq`](Self::iq) with a chosen timeout.
    pub async fn iq_timeout(&mut self, iq: Element, timeout: Duration) -> Element {
        let text = to_xml(&iq);
        match self.try_iq(iq, timeout).await {
            Ok(reply) => reply,
            Err(e) => panic!("{}: no reply to {text}: {e}", self.label),
        }
    }

    /// Sends an iq and waits for its reply; `Err` on timeout or closed stream.
    pub async fn try_iq(&mut self, mut iq: Element, timeout: Duration) -> Result<Element, String> {
        assert_eq!(iq.name(), "iq", "{}: iq() needs an <iq/>, got {}", self.label, to_xml(&iq));
        let id = match iq.attr("id") {
            Some(id) => id.to_string(),
            None => {
                let id = self.fresh_id();
                set_attr(&mut iq, "id", &id);
                id
            }
        };
        self.try_send(iq).await?;
        let reply = self
            .wait_for(timeout, |el| {
                el.name() == "iq" && el.attr("id") == Some(id.as_str()) && matches!(stanza_type(el), "result" | "error")
            })
            .await;
        match reply {
            Some(reply) => Ok(reply),
            None => Err(match &self.closed {
                Some(reason) => format!("stream closed: {reason}"),
                None => format!("timed out after {timeout:?}"),
            }),
        }
    }

    /// The next `<message/>` (in arrival order), or `None` after `timeout` or when the stream
    /// is closed and nothing is left.
    pub async fn next_message(&mut self, timeout: Duration) -> Option<Element> {
        self.wait_for(timeout, |el| el.name() == "message").await
    }

    /// The next `<presence/>`.
    pub async fn next_presence(&mut self, timeout: Duration) -> Option<Element> {
        self.wait_for(timeout, |el| el.name() == "presence").await
    }

    /// The next iq request (`get` or `set`) sent to this entity.
    pub async fn next_iq_request(&mut self, timeout: Duration) -> Option<Element> {
        self.wait_for(timeout, |el| el.name() == "iq" && matches!(stanza_type(el), "get" | "set")).await
    }

    /// The next stanza of any kind.
    pub async fn next_stanza(&mut self, timeout: Duration) -> Option<Element> {
        self.wait_for(timeout, |_| true).await
    }

    /// The first stanza (queued or arriving within `timeout`) for which `pred` holds; the
    /// others stay queued in order.
    pub async fn wait_for(&mut self, timeout: Duration, pred: impl Fn(&Element) -> bool) -> Option<Element> {
        if let Some(pos) = self.pending.iter().position(&pred) {
            return self.pending.remove(pos);
        }
        let deadline = Instant::now() + timeout;
        while self.closed.is_none() {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Err(_) => return None,
                Ok(Some(Event::Stanza(el))) => {
                    let el = if self.wire_ns != NS_CLIENT { rename_ns(&el, self.wire_ns, NS_CLIENT) } else { el };
                    if pred(&el) {
                        return Some(el);
                    }
                    self.pending.push_back(el);
                }
                Ok(Some(Event::Closed(reason))) => self.closed = Some(reason),
                Ok(None) => self.closed = Some("connection task ended".into()),
            }
        }
        None
    }

    /// The stanzas already queued (received before whatever was last taken) for which
    /// `pred` holds, taken out in arrival order; nothing is waited for or read.
    pub fn take_queued(&mut self, pred: impl Fn(&Element) -> bool) -> Vec<Element> {
        let (taken, kept) = self.pending.drain(..).partition(|el| pred(el));
        self.pending = kept;
        taken.into()
    }

    /// Everything received and not yet taken, without waiting.
    pub fn drain(&mut self) -> Vec<Element> {
        while let Ok(event) = self.events.try_recv() {
            match event {
                Event::Stanza(el) => self.pending.push_back(if self.wire_ns != NS_CLIENT {
                    rename_ns(&el, self.wire_ns, NS_CLIENT)
                } else {
                    el
                }),
                Event::Closed(reason) => self.closed = Some(reason),
            }
        }
        self.pending.drain(..).collect()
    }

    /// Why the stream ended, if it has (as far as this side has seen so far).
    pub fn closed_reason(&self) -> Option<&str> {
        self.closed.as_deref()
    }

    /// Waits until the server closes the stream (queued stanzas are kept); returns the
    /// reason, or `None` if it is still open after `timeout`.
    pub async fn wait_closed(&mut self, timeout: Duration) -> Option<String> {
        self.wait_for(timeout, |_| false).await;
        self.closed.clone()
    }

    /// Closes the stream cleanly (footer, then waits briefly for the server's footer).
    pub async fn close(self) {
        let (done_tx, done) = oneshot::channel();
        if self.commands.send(Command::Close(done_tx)).is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(5), done).await;
        }
    }
}

/// The task owning the socket. `stream.next()` keeps its parse state inside the stream, so
/// dropping it in `select!` when a command arrives loses nothing.
async fn drive(
    mut stream: Stream,
    mut commands: mpsc::UnboundedReceiver<Command>,
    events: mpsc::UnboundedSender<Event>,
) {
    let mut stream_error: Option<String> = None;
    let reason = loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(Command::Send(stanza, ack)) => {
                    if let Err(e) = stream.send(&stanza).await {
                        let reason = format!("write failed: {e}");
                        let _ = ack.send(Err(reason.clone()));
                        break reason;
                    }
                    let _ = ack.send(Ok(()));
                }
                Some(Command::Close(done)) => {
                    let _ = tokio::time::timeout(Duration::from_secs(2), async {
                        let _ = stream.shutdown().await;
                        // Wait for the peer's footer or EOF.
                        while let Some(item) = stream.next().await {
                            if matches!(item, Err(ReadError::StreamFooterReceived | ReadError::HardError(_))) {
                                break;
                            }
                        }
                    })
                    .await;
                    let _ = done.send(());
                    break "closed by the test".to_string();
                }
                None => {
                    // The test dropped the handle: say goodbye, but do not wait.
                    let _ = tokio::time::timeout(Duration::from_secs(1), stream.shutdown()).await;
                    break "handle dropped".to_string();
                }
            },
            item = stream.next() => match item {
                Some(Ok(el)) if el.is("error", NS_STREAMS) => {
                    stream_error = Some(describe_stream_error(&el));
                }
                Some(Ok(el)) => {
                    let _ = events.send(Event::Stanza(el));
                }
                Some(Err(ReadError::SoftTimeout)) => {}
                Some(Err(ReadError::ParseError(e))) => {
                    // Well-formed but not convertible: cannot happen for `Element`; keep going.
                    eprintln!("test connection: unparseable stanza skipped: {e}");
                }
                Some(Err(ReadError::StreamFooterReceived)) => {
                    let _ = tokio::time::timeout(Duration::from_secs(1), stream.shutdown()).await;
                    break match stream_error.take() {
                        Some(e) => format!("server closed the stream after {e}"),
                        None => "server closed the stream".to_string(),
                    };
                }
                Some(Err(ReadError::HardError(e))) => {
                    break match stream_error.take() {
                        Some(se) => format!("connection lost after {se}: {e}"),
                        None => format!("connection lost: {e}"),
                    };
                }
                None => {
                    break match stream_error.take() {
                        Some(e) => format!("connection closed after {e}"),
                        None => "connection closed".to_string(),
                    };
                }
            },
        }
    };
    let _ = events.send(Event::Closed(reason));
}
