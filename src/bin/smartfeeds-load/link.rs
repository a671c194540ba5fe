//! A raw XEP-0114 component connection built for load: one reader task, one writer task,
//! and any number of requesters in between.
//!
//! Why not `tokio_xmpp::Component` or the test harness's `Connection`: both own the socket
//! from one task, so a burst of replies and a burst of requests take turns, and every stanza
//! is built as a typed value. Here the login and the reading half are the component's own
//! ([`smartfeeds::component::stream`]); the writer task batches whatever text is queued into
//! one `write_all` (stanzas are formatted by hand, see `stanzas`), and the reader task hands
//! iq replies straight to the waiting requester by id and everything else (pushes) to an
//! [`Inbox`].
//!
//! Stanzas on the wire inherit the stream's default namespace, `jabber:component:accept`;
//! elements parsed from the server carry it too. Only names and attributes are compared.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use minidom::Element;
use smartfeeds::component::stream::{self, Frame, Limits, Reader};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot};

use crate::stanzas::esc;

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
    Close,
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Element>>>>;

/// A logged-in component stream. Cheap to share behind an `Arc`.
pub struct Link {
    domain: String,
    out: mpsc::UnboundedSender<Out>,
    pending: Pending,
    next_id: AtomicU64,
    closed: Arc<Mutex<Option<String>>>,
}

/// Stanzas the server sent that are not replies to our iqs: messages (pushes), presences.
pub struct Inbox(pub mpsc::UnboundedReceiver<Element>);

impl Link {
    /// Connects to `addr` as the component `domain` and logs in with `secret`.
    pub async fn connect(addr: SocketAddr, domain: &str, secret: &str) -> Result<(Arc<Link>, Inbox), String> {
        let limits = Limits { max_stanza_bytes: 64 << 20, ..Limits::default() };
        let (reader, writer) = stream::connect(&addr.to_string(), domain, secret, limits, LOGIN_TIMEOUT)
            .await
            .map_err(|e| e.to_string())?;
        let w = writer.into_inner();
        let (out, out_rx) = mpsc::unbounded_channel();
        let (inbox_tx, inbox_rx) = mpsc::unbounded_channel();
        let link = Arc::new(Link {
            domain: domain.to_string(),
            out,
            pending: Arc::default(),
            next_id: AtomicU64::new(0),
            closed: Arc::default(),
        });
        tokio::spawn(write_loop(w, out_rx, link.closed.clone()));
        tokio::spawn(read_loop(reader, link.pending.clone(), inbox_tx, link.out.clone(), link.closed.clone()));
        Ok((link, Inbox(inbox_rx)))
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
            Some(Out::Text(t)) => buf.extend_from_slice(t.as_bytes()),
            Some(Out::Close) | None => closing = true,
        }
        while !closing && buf.len() < WRITE_BATCH {
            match rx.try_recv() {
                Ok(Out::Text(t)) => buf.extend_from_slice(t.as_bytes()),
                Ok(Out::Close) => closing = true,
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

/// Reads stanzas: iq replies go to their requester, iq requests get `service-unavailable`
/// (every iq get/set deserves one reply), the rest goes to the inbox.
async fn read_loop(
    mut reader: Reader,
    pending: Pending,
    inbox: mpsc::UnboundedSender<Element>,
    out: mpsc::UnboundedSender<Out>,
    closed: Arc<Mutex<Option<String>>>,
) {
    let mut stream_error = None;
    let why = loop {
        let el = match reader.next().await {
            Frame::Element(el) => el,
            Frame::Dropped { header, why, .. } => {
                break format!("an unreadable <{}> from the server: {why}", header.name);
            }
            Frame::End(why) => break why,
        };
        match (el.name(), el.attr("type").unwrap_or("")) {
            ("iq", "result" | "error") => {
                let n = el.attr("id").and_then(|id| id.strip_prefix('l')).and_then(|n| n.parse::<u64>().ok());
                let waiter = n.and_then(|n| pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&n));
                if let Some(waiter) = waiter {
                    let _ = waiter.send(el);
                }
            }
            ("iq", "get" | "set") => {
                let (to, from, id) = (el.attr("to").unwrap_or(""), el.attr("from").unwrap_or(""), el.attr("id"));
                let reply = format!(
                    "<iq type='error' from='{}' to='{}' id='{}'><error type='cancel'><service-unavailable \
                     xmlns='urn:ietf:params:xml:ns:xmpp-stanzas'/></error></iq>",
                    esc(to),
                    esc(from),
                    esc(id.unwrap_or(""))
                );
                let _ = out.send(Out::Text(reply));
            }
            ("error", _) => stream_error = Some(stream::stream_error(&el)),
            _ => {
                let _ = inbox.send(el);
            }
        }
    };
    let why = match stream_error {
        Some(e) => format!("{why} after <stream:error> {e}"),
        None => why,
    };
    set_closed(&closed, why);
    // Dropping the waiters wakes every requester with `Closed`.
    pending.lock().unwrap_or_else(|p| p.into_inner()).clear();
}
