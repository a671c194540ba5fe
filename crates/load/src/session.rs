//! Client sessions (RFC 6120 c2s) built for load: subscribers who are users of the
//! server, each with a connection (and, in the server, a session process) of their own, as
//! real readers are.
//!
//! A session logs in with SASL ANONYMOUS, so no accounts need creating: the server names
//! each one (`random@DOMAIN/resource`). It then binds a resource and sends its initial
//! presence, without which a server delivers no headline sent to the bare JID. Setting up
//! is one request at a time (`iq` reads until the answer); afterwards `listen` hands every
//! message to an inbox, as bytes, like [`Link`](crate::link::Link) does for a component.
//!
//! Each session reads through a small buffer: ten thousand of them must not take gigabytes.

use std::net::SocketAddr;
use std::time::Duration;

use minidom::Element;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::link::{NS_STREAM, Reader, build_in, refusal, stream_error};
use crate::scan::{self, Piece};
use crate::stanzas::esc;

const NS_CLIENT: &str = "jabber:client";
const NS_SASL: &str = "urn:ietf:params:xml:ns:xmpp-sasl";
const NS_BIND: &str = "urn:ietf:params:xml:ns:xmpp-bind";
/// Bytes asked of the socket per read: a few notifications.
const READ_SIZE: usize = 4096;
/// How long connecting, logging in and binding may take.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(30);

/// A session's listener task (see [`Session::listen`]): the session back once stopped, or
/// why its stream ended.
pub type Listener = JoinHandle<Result<Session, String>>;

/// A logged-in client session with its initial presence sent.
pub struct Session {
    /// The bare JID the server gave it.
    pub jid: String,
    reader: Reader,
    w: OwnedWriteHalf,
    next_id: u64,
}

impl Session {
    /// Connects to the c2s port at `addr` and logs in anonymously to `domain`.
    pub async fn open(addr: SocketAddr, domain: &str) -> Result<Session, String> {
        tokio::time::timeout(LOGIN_TIMEOUT, Session::login(addr, domain))
            .await
            .map_err(|_| format!("no login within {LOGIN_TIMEOUT:?}"))?
    }

    async fn login(addr: SocketAddr, domain: &str) -> Result<Session, String> {
        let tcp = TcpStream::connect(addr).await.map_err(|e| format!("connect to {addr}: {e}"))?;
        tcp.set_nodelay(true).map_err(|e| format!("connect to {addr}: {e}"))?;
        let (r, w) = tcp.into_split();
        let mut s = Session { jid: String::new(), reader: Reader::new(r, READ_SIZE), w, next_id: 0 };
        let features = s.start_stream(domain).await?;
        let offers_anonymous = scan::child(&features, "mechanisms", NS_SASL)
            .is_some_and(|m| scan::children(m).any(|c| scan::text(c) == "ANONYMOUS"));
        if !offers_anonymous {
            return Err(format!("{domain} offers no SASL ANONYMOUS login (the server must allow anonymous users)"));
        }
        // An empty initial response is written `=` (RFC 6120 §6.4.2).
        s.write(&format!("<auth xmlns='{NS_SASL}' mechanism='ANONYMOUS'>=</auth>")).await?;
        let answer = s.next().await?;
        if scan::name(&answer) != b"success" {
            return Err(format!("anonymous login refused: {}", String::from_utf8_lossy(&answer)));
        }
        s.start_stream(domain).await?;
        let bound = s.iq("set", None, &format!("<bind xmlns='{NS_BIND}'/>")).await?;
        let jid = bound.get_child("bind", NS_BIND).and_then(|b| b.get_child("jid", NS_BIND)).map(|j| j.text());
        let Some(jid) = jid.filter(|j| j.contains('@')) else { return Err("no JID bound".into()) };
        s.jid = jid.split('/').next().unwrap_or_default().to_string();
        s.write("<presence/>").await?;
        Ok(s)
    }

    /// Opens (or restarts) the stream; the server's `<stream:features/>`.
    async fn start_stream(&mut self, domain: &str) -> Result<Vec<u8>, String> {
        self.write(&format!(
            "<?xml version='1.0'?><stream:stream xmlns='{NS_CLIENT}' xmlns:stream='{NS_STREAM}' to='{}' \
             version='1.0'>",
            esc(domain)
        ))
        .await?;
        self.reader.stream_header().await?;
        let features = self.next().await?;
        match scan::name(&features) {
            b"stream:features" => Ok(features),
            _ => Err(format!("expected <stream:features/>, got {}", String::from_utf8_lossy(&features))),
        }
    }

    async fn write(&mut self, text: &str) -> Result<(), String> {
        self.w.write_all(text.as_bytes()).await.map_err(|e| format!("write failed: {e}"))
    }

    /// The next top-level element; a stream error is an error.
    async fn next(&mut self) -> Result<Vec<u8>, String> {
        let el = self.reader.next().await?;
        match scan::name(&el) {
            b"stream:error" => Err(format!("stream error: {}", stream_error(&el))),
            _ => Ok(el),
        }
    }

    /// Sends an iq of type `kind` (to the server itself when `to` is `None`) and reads
    /// until its answer, which is returned as is. What arrives in between (a service's
    /// last item on subscription, presences) is dropped; an iq request gets refused.
    pub async fn iq(&mut self, kind: &str, to: Option<&str>, payload: &str) -> Result<Element, String> {
        self.next_id += 1;
        let id = format!("s{}", self.next_id);
        let to = to.map(|to| format!(" to='{}'", esc(to))).unwrap_or_default();
        self.write(&format!("<iq type='{kind}' id='{id}'{to}>{payload}</iq>")).await?;
        loop {
            let el = self.next().await?;
            if scan::name(&el) != b"iq" {
                continue;
            }
            match scan::attr(&el, "type").as_deref() {
                Some("result" | "error") if scan::attr(&el, "id").as_deref() == Some(id.as_str()) => {
                    return build_in(&el, NS_CLIENT);
                }
                Some("get" | "set") => self.write(&refusal(&el)).await?,
                _ => {}
            }
        }
    }

    /// Hands every message that arrives to `inbox` until `stop` changes; then gives the
    /// session back (or why its stream ended).
    pub fn listen(mut self, inbox: mpsc::UnboundedSender<Vec<u8>>, mut stop: watch::Receiver<bool>) -> Listener {
        tokio::spawn(async move {
            loop {
                while let Some(piece) = self.reader.splitter.next() {
                    let Piece::Element(el) = piece else { return Err("the server closed the stream".into()) };
                    match scan::name(el) {
                        b"message" => {
                            let _ = inbox.send(el.to_vec());
                        }
                        b"iq" if matches!(scan::attr(el, "type").as_deref(), Some("get" | "set")) => {
                            let answer = refusal(el);
                            self.write(&answer).await?;
                        }
                        _ => {}
                    }
                }
                tokio::select! {
                    filled = self.reader.fill() => filled?,
                    _ = stop.changed() => return Ok(self),
                }
            }
        })
    }

    /// Ends the stream and waits (briefly) for the server to close its side, so that the
    /// session is gone from the server when this returns.
    pub async fn close(mut self) {
        if self.write("</stream:stream>").await.is_ok() {
            let _ =
                tokio::time::timeout(Duration::from_secs(5), async { while self.reader.next().await.is_ok() {} }).await;
        }
    }
}
