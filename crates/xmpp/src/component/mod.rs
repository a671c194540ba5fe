//! The XEP-0114 link to the server: log in, read stanzas, write the outbound queues, keep the
//! link alive, come back by itself when it drops, and close it without losing a request.
//!
//! The XML stream itself is [`stream`]: rxml and xso used directly, with limits that keep a
//! hostile stanza from taking the link down.

pub mod stream;
mod typed;

use crate::multicast::Outgoing as PushOut;
use crate::reply::Reply;
use crate::stanza_parts::{Parts, ToParts};
use jid::Jid;
use std::time::{Duration, Instant};
use stream::{Frame, Header, Limits, Reader, Writer};
use tokio::sync::{mpsc, watch};
use xmpp_parsers::iq::Iq;
use xmpp_parsers::ping::Ping;
use xmpp_parsers::stanza::Stanza;
use xmpp_parsers::stanza_error::{DefinedCondition, ErrorType, StanzaError};

/// Where and how to connect.
#[derive(Clone, Debug)]
pub struct LinkConfig {
    /// The server's component ports, `host:port`, tried in turn.
    pub servers: Vec<String>,
    /// Our domain.
    pub jid: Jid,
    pub secret: String,
    /// Who answers our keepalive pings: the server's own domain.
    pub ping_to: Jid,
    /// How often to ping, so that a healthy link always has traffic both ways.
    pub keepalive: Duration,
    /// A server silent this long (no pong, nothing) is taken for gone.
    pub silence: Duration,
    /// The longest wait between reconnect attempts.
    pub max_backoff: Duration,
    /// What one inbound stanza may be.
    pub limits: Limits,
    /// At shutdown, how long to keep reading (and refusing) requests the server already
    /// routed to us before the stream is closed.
    pub drain: Duration,
}

impl LinkConfig {
    /// Defaults for a component `jid` on the servers at `servers` (tried in turn).
    pub fn new(servers: Vec<String>, jid: Jid, secret: String) -> LinkConfig {
        let domain = jid.domain().as_str();
        let parent = domain.split_once('.').map_or(domain, |(_, p)| p);
        let ping_to = Jid::new(parent).unwrap_or_else(|_| jid.clone());
        LinkConfig {
            servers,
            jid,
            secret,
            ping_to,
            keepalive: Duration::from_secs(20),
            silence: Duration::from_secs(75),
            max_backoff: Duration::from_secs(30),
            limits: Limits::default(),
            drain: Duration::from_secs(2),
        }
    }
}

/// What the link hands to the application.
#[derive(Debug)]
pub enum Inbound {
    Stanza(Box<Stanza>),
    /// A stanza that did not parse, or broke a [`Limits`] limit (`over_limit`). An iq
    /// among them must still be answered.
    Malformed {
        header: Header,
        why: String,
        over_limit: bool,
    },
    /// The link is up (again); `n` counts the logins so far.
    Connected {
        n: u64,
    },
    /// The link went down; the loop is reconnecting.
    Disconnected {
        reason: String,
    },
}

/// What one read gave.
enum Read {
    Stanza(Box<Stanza>),
    Malformed {
        header: Header,
        why: String,
        over_limit: bool,
    },
    /// Not a stanza (an unknown top-level element): nothing to do.
    Other(String),
    Gone(String),
}

async fn read(reader: &mut Reader) -> Read {
    match reader.next().await {
        Frame::Element(el) if el.name() == "error" && el.ns() == "http://etherx.jabber.org/streams" => {
            Read::Gone(format!("stream error: {}", stream::stream_error(&el)))
        }
        Frame::Element(el) => match typed::stanza(el).map_err(|e| *e) {
            Ok(s) => Read::Stanza(Box::new(s)),
            Err((_, xso::error::FromElementError::Mismatch(el))) => Read::Other(el.name().to_string()),
            Err((header, xso::error::FromElementError::Invalid(e))) => {
                Read::Malformed { header, why: e.to_string(), over_limit: false }
            }
        },
        Frame::Dropped { header, why, over_limit } => Read::Malformed { header, why, over_limit },
        Frame::End(why) => Read::Gone(why),
    }
}

/// `service-unavailable` (wait) for a get or set that arrives during shutdown.
fn refusal(cfg: &LinkConfig, stanza: Stanza) -> Option<Reply> {
    let (Stanza::Iq(Iq::Get { from: Some(from), id, .. }) | Stanza::Iq(Iq::Set { from: Some(from), id, .. })) = stanza
    else {
        return None;
    };
    let error =
        StanzaError::new(ErrorType::Wait, DefinedCondition::ServiceUnavailable, "en", "the service is shutting down");
    Some(Iq::Error { from: Some(cfg.jid.clone()), to: Some(from), id, error, payload: None }.into())
}

fn ping(cfg: &LinkConfig, id: String) -> Reply {
    Iq::from_get(id, Ping).with_from(cfg.jid.clone()).with_to(cfg.ping_to.clone()).into()
}

/// Whether `s` is a reply to the ping with this id.
fn is_reply_to(s: &Stanza, ping_id: &str) -> bool {
    matches!(s, Stanza::Iq(Iq::Result { id, .. } | Iq::Error { id, .. }) if id == ping_id)
}

/// The two queues the link writes: replies go before pushes, so a burst of fan-out never
/// delays an answer.
pub struct Outbound {
    pub replies: mpsc::Receiver<Reply>,
    pub pushes: mpsc::Receiver<PushOut>,
}

/// What the link writes next: a reply, or a push (one copy, or one multicast message; either
/// is written around the body all copies share).
#[allow(clippy::large_enum_variant, reason = "there is only ever one: the link's next write")]
enum Outgoing {
    Reply(Reply),
    Push(PushOut),
}

impl ToParts for Outgoing {
    fn parts(&self) -> Result<Parts<'_>, xso::error::Error> {
        match self {
            Outgoing::Reply(r) => r.parts(),
            Outgoing::Push(p) => p.parts(),
        }
    }
}

/// Encoded stanzas are written once this much is buffered, even if more are ready.
const WRITE_BATCH: usize = 64 * 1024;

/// How often a hot standby asks whether the active instance is gone.
const STANDBY_RETRY: Duration = Duration::from_secs(1);

/// Runs the link until both outbound queues are closed (every sender dropped) and drained:
/// then closes the stream cleanly (see [`close`]) and returns. Inbound stanzas go to
/// `inbound`, which must not block. Once `closing` is true, requests are refused here.
///
/// While the link is down, outbound stanzas wait in their queues, and the one being written
/// when the link broke is written again after the next login, so replies and pushes
/// produced during an outage are not lost. Stanzas encoded but not yet written when the
/// link broke are lost; a push [`Receipt`](feed::Receipt) is signed only after a write
/// that succeeded, so whoever waits on it knows the pushes before it left.
pub async fn run(cfg: LinkConfig, mut out: Outbound, closing: watch::Receiver<bool>, mut inbound: impl FnMut(Inbound)) {
    let mut logins = 0u64;
    let mut backoff = Duration::from_millis(250);
    let mut pending: Option<Outgoing> = None;
    let (mut replies_open, mut pushes_open) = (true, true);
    let mut pings = 0u64;
    // Which server of the list is tried next, and whether we stand by for another instance.
    let (mut at, mut standing_by) = (0usize, false);
    loop {
        let domain = cfg.jid.domain().as_str();
        let addr = cfg.servers[at % cfg.servers.len().max(1)].as_str();
        let (mut reader, mut writer) =
            match stream::connect(addr, domain, &cfg.secret, cfg.limits, Duration::from_secs(10)).await {
                Ok(link) => link,
                Err(e) if *closing.borrow() => {
                    tracing::warn!(server = %addr, error = %e, "shutting down without a server connection");
                    return;
                }
                // Another instance holds the domain on this server (Prosody takes one
                // connection per component): wait as its hot standby and take over as soon
                // as it goes.
                Err(stream::ConnectError::Refused { condition, .. }) if condition.starts_with("conflict") => {
                    if !standing_by {
                        tracing::info!(server = %addr, %domain, "another instance is connected; standing by");
                        standing_by = true;
                    }
                    tokio::time::sleep(STANDBY_RETRY).await;
                    continue;
                }
                Err(e) => {
                    at += 1;
                    // A full round of the list failed: wait before the next.
                    let wait = if at % cfg.servers.len().max(1) == 0 { backoff } else { Duration::ZERO };
                    tracing::warn!(server = %addr, error = %e, retry_in = ?wait, "cannot connect to the server");
                    if !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                        backoff = (backoff * 2).min(cfg.max_backoff);
                    }
                    continue;
                }
            };
        standing_by = false;
        logins += 1;
        backoff = Duration::from_millis(250);
        tracing::info!(server = %addr, jid = %cfg.jid, "connected");
        inbound(Inbound::Connected { n: logins });
        let mut keepalive = tokio::time::interval(cfg.keepalive);
        keepalive.tick().await;
        let mut heard = Instant::now();
        let reason = loop {
            if let Some(next) = pending.take() {
                if let Err(e) = writer.feed(&next) {
                    tracing::error!(error = %e, "a stanza could not be encoded; dropped");
                }
                if writer.buffered() >= WRITE_BATCH
                    && let Err(e) = writer.flush().await
                {
                    break format!("write failed: {e}");
                }
            }
            if !replies_open && !pushes_open {
                // Every sender is gone: the application is shutting down.
                close(&cfg, &mut reader, &mut writer).await;
                return;
            }
            // Encoded stanzas are written once nothing else is ready: a burst of pushes or
            // replies then leaves in a few large writes instead of one system call each.
            let unflushed = writer.buffered() > 0;
            tokio::select! {
                // Replies first (they are what clients wait on), then new requests (reading
                // less when replies back up is the backpressure), then pushes.
                biased;
                r = out.replies.recv(), if replies_open => match r {
                    Some(reply) => pending = Some(Outgoing::Reply(reply)),
                    None => replies_open = false,
                },
                r = read(&mut reader) => {
                    heard = Instant::now();
                    match r {
                        // Shutting down: requests are answered here, so none that arrives
                        // before the stream closes goes unanswered.
                        Read::Stanza(s) if *closing.borrow() => pending = refusal(&cfg, *s).map(Outgoing::Reply),
                        Read::Stanza(s) => inbound(Inbound::Stanza(s)),
                        Read::Malformed { header, why, over_limit } => {
                            inbound(Inbound::Malformed { header, why, over_limit })
                        }
                        Read::Other(name) => tracing::debug!(element = %name, "ignored a top-level element"),
                        Read::Gone(reason) => break reason,
                    }
                }
                r = out.pushes.recv(), if pushes_open => match r {
                    // Everything before it was fed to the writer: once it is written, the
                    // pushes have left. A failed write drops the receipt unsigned.
                    Some(PushOut::Receipt(receipt)) => {
                        if let Err(e) = writer.flush().await {
                            break format!("write failed: {e}");
                        }
                        receipt.sign();
                    }
                    Some(push) => pending = Some(Outgoing::Push(push)),
                    None => pushes_open = false,
                },
                _ = keepalive.tick() => {
                    if heard.elapsed() > cfg.silence {
                        break format!("nothing from the server for {:?}", heard.elapsed());
                    }
                    pings += 1;
                    pending = Some(Outgoing::Reply(ping(&cfg, format!("keepalive-{pings}"))));
                }
                _ = std::future::ready(()), if unflushed => {
                    if let Err(e) = writer.flush().await {
                        break format!("write failed: {e}");
                    }
                }
            }
        };
        tracing::warn!(server = %addr, %reason, "lost the server connection; reconnecting");
        inbound(Inbound::Disconnected { reason });
    }
}

/// Closes the stream without leaving a request unanswered where that can be helped.
///
/// The server keeps routing requests to us until it has read our `</stream:stream>`, and
/// after that we may not write. So first we ask the server for a pong and read up to it,
/// refusing every request on the way: the server writes to us in order, so then everything
/// it routed to us before the ping is answered. That repeats while requests keep coming (up
/// to [`LinkConfig::drain`]); then the footer goes out, and what still arrives before the
/// server's own footer cannot be answered: each such request is logged with its id.
async fn close(cfg: &LinkConfig, reader: &mut Reader, writer: &mut Writer) {
    let deadline = tokio::time::Instant::now() + cfg.drain;
    let mut refused = 0usize;
    for round in 1.. {
        let marker = format!("drain-{round}");
        let sent = writer.feed(&ping(cfg, marker.clone())).is_ok() && writer.flush().await.is_ok();
        let mut requests = 0usize;
        let mut pong = false;
        while sent && !pong {
            let Ok(r) = tokio::time::timeout_at(deadline, read(reader)).await else { break };
            match r {
                Read::Stanza(s) if is_reply_to(&s, &marker) => pong = true,
                Read::Stanza(s) => {
                    if let Some(reply) = refusal(cfg, *s) {
                        requests += 1;
                        let _ = writer.feed(&reply);
                    }
                }
                Read::Malformed { header, .. } if header.name == "iq" => {
                    tracing::warn!(id = ?header.id, from = ?header.from, "a malformed request arrived during shutdown; not answered");
                }
                Read::Malformed { .. } | Read::Other(_) => {}
                Read::Gone(reason) => {
                    tracing::info!(%reason, refused, "stream closed by the server during shutdown");
                    return;
                }
            }
        }
        refused += requests;
        if !pong || requests == 0 || tokio::time::Instant::now() >= deadline {
            break;
        }
    }
    if let Err(e) = writer.close().await {
        tracing::debug!(error = %e, "closing the stream");
    }
    let mut late = 0usize;
    let until = tokio::time::Instant::now() + Duration::from_secs(1);
    while let Ok(r) = tokio::time::timeout_at(until, read(reader)).await {
        match r {
            Read::Stanza(s) => {
                if let Stanza::Iq(Iq::Get { id, from, .. } | Iq::Set { id, from, .. }) = *s {
                    late += 1;
                    tracing::warn!(%id, from = ?from, "a request arrived after the stream was closed; it cannot be answered");
                }
            }
            Read::Gone(_) => break,
            _ => {}
        }
    }
    tracing::info!(refused, late, "stream closed");
}
