//! The XEP-0114 link to the server: log in, read stanzas, write the outbound queue, keep the
//! link alive, and come back by itself when it drops.
//!
//! Why not `tokio_xmpp::Component`: its stream turns every failure into `None`, so a read
//! timeout, an unparseable stanza and a dead server look alike, and a bad iq cannot be
//! answered. The same few lines of login over `tokio_xmpp::xmlstream` tell them apart.

use futures::{SinkExt, StreamExt};
use jid::Jid;
use std::time::Duration;
use tokio::io::BufStream;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_xmpp::Stanza;
use tokio_xmpp::connect::{DnsConfig, ServerConnector, TcpServerConnector};
use tokio_xmpp::xmlstream::{
    FallibleStreamElement, ReadError, StreamElementError, Timeouts, XmppStream, XmppStreamElement,
};
use xmpp_parsers::component::Handshake;
use xmpp_parsers::iq::Iq;
use xmpp_parsers::ns;
use xmpp_parsers::ping::Ping;
use xso::AsXml;

use crate::xmpp::payloads::Push;

type Link = XmppStream<BufStream<TcpStream>>;

/// Where and how to connect.
#[derive(Clone, Debug)]
pub struct LinkConfig {
    /// The server's component port, `ip:port`.
    pub addr: String,
    /// Our domain.
    pub jid: Jid,
    pub secret: String,
    /// Who answers our keepalive pings: the server's own domain.
    pub ping_to: Jid,
    /// How often to ping; well inside `timeouts.read_timeout` so a healthy link never idles.
    pub keepalive: Duration,
    pub timeouts: Timeouts,
    /// The longest wait between reconnect attempts.
    pub max_backoff: Duration,
}

impl LinkConfig {
    /// Defaults for a component `jid` on the server at `addr`.
    pub fn new(addr: String, jid: Jid, secret: String) -> LinkConfig {
        let domain = jid.domain().as_str();
        let parent = domain.split_once('.').map_or(domain, |(_, p)| p);
        let ping_to = Jid::new(parent).unwrap_or_else(|_| jid.clone());
        LinkConfig {
            addr,
            jid,
            secret,
            ping_to,
            keepalive: Duration::from_secs(20),
            timeouts: Timeouts::tight(),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// What the link hands to the application.
#[derive(Debug)]
pub enum Inbound {
    Stanza(Box<Stanza>),
    /// A stanza that did not parse. An iq among them must still be answered (`bad-request`).
    Malformed {
        kind: String,
        id: Option<String>,
        from: Option<String>,
        why: String,
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
        kind: String,
        id: Option<String>,
        from: Option<String>,
        why: String,
    },
    /// Silent for a read timeout: ping now, or the link dies after the response timeout.
    Idle,
    Gone(String),
}

async fn login(cfg: &LinkConfig) -> Result<Link, String> {
    let connector = TcpServerConnector::from(DnsConfig::addr(&cfg.addr));
    let (mut pending, _) =
        connector.connect(&cfg.jid, ns::COMPONENT, cfg.timeouts).await.map_err(|e| format!("connect: {e}"))?;
    let stream_id = pending.take_header().id.ok_or("the server sent no stream id")?.into_owned();
    let mut link: Link = pending.skip_features();
    let handshake = Handshake::from_stream_id_and_password(stream_id, &cfg.secret);
    link.send(&XmppStreamElement::ComponentHandshake(handshake)).await.map_err(|e| format!("handshake: {e}"))?;
    loop {
        match link.next().await {
            Some(Ok(FallibleStreamElement::Ok(XmppStreamElement::ComponentHandshake(_)))) => return Ok(link),
            Some(Err(ReadError::SoftTimeout)) => continue,
            Some(Ok(FallibleStreamElement::Ok(XmppStreamElement::StreamError(e)))) => {
                return Err(format!("the server refused us: {e}"));
            }
            other => return Err(format!("handshake refused (wrong secret or domain?): {other:?}")),
        }
    }
}

async fn read(link: &mut Link) -> Read {
    match link.next().await {
        Some(Ok(FallibleStreamElement::Ok(XmppStreamElement::Stanza(s)))) => Read::Stanza(Box::new(s)),
        Some(Ok(FallibleStreamElement::Ok(XmppStreamElement::StreamError(e)))) => {
            Read::Gone(format!("stream error: {e}"))
        }
        Some(Ok(FallibleStreamElement::Ok(other))) => Read::Gone(format!("unexpected element {other:?}")),
        Some(Ok(FallibleStreamElement::Err(StreamElementError::InvalidStanza { name, header, error, .. }))) => {
            Read::Malformed { kind: name.to_string(), id: header.id, from: header.from, why: error.to_string() }
        }
        Some(Ok(FallibleStreamElement::Err(e))) => Read::Gone(e.to_string()),
        Some(Err(ReadError::SoftTimeout)) => Read::Idle,
        Some(Err(e)) => Read::Gone(e.to_string()),
        None => Read::Gone("the server closed the connection".into()),
    }
}

/// `service-unavailable` (wait) for a get or set that arrives during shutdown.
fn refusal(cfg: &LinkConfig, stanza: Stanza) -> Option<Stanza> {
    let (Stanza::Iq(Iq::Get { from: Some(from), id, .. }) | Stanza::Iq(Iq::Set { from: Some(from), id, .. })) = stanza
    else {
        return None;
    };
    let error = xmpp_parsers::stanza_error::StanzaError::new(
        xmpp_parsers::stanza_error::ErrorType::Wait,
        xmpp_parsers::stanza_error::DefinedCondition::ServiceUnavailable,
        "en",
        "the service is shutting down",
    );
    Some(Iq::Error { from: Some(cfg.jid.clone()), to: Some(from), id, error, payload: None }.into())
}

fn ping(cfg: &LinkConfig, n: u64) -> Stanza {
    Iq::from_get(format!("keepalive-{n}"), Ping).with_from(cfg.jid.clone()).with_to(cfg.ping_to.clone()).into()
}

/// The two queues the link writes: replies go before pushes, so a burst of fan-out never
/// delays an answer.
pub struct Outbound {
    pub replies: mpsc::Receiver<Stanza>,
    pub pushes: mpsc::Receiver<Push>,
}

/// What the link writes next: a stanza, or one copy of a push (which it writes straight from
/// the body all copies share).
#[allow(clippy::large_enum_variant, reason = "there is only ever one: the link's next write")]
enum Outgoing {
    Stanza(Stanza),
    Push(Push),
}

impl AsXml for Outgoing {
    type ItemIter<'x> = Box<dyn Iterator<Item = Result<xso::Item<'x>, xso::error::Error>> + 'x>;

    fn as_xml_iter(&self) -> Result<Self::ItemIter<'_>, xso::error::Error> {
        match self {
            Outgoing::Stanza(s) => s.as_xml_dyn_iter(),
            Outgoing::Push(p) => p.as_xml_iter(),
        }
    }
}

/// Runs the link until both outbound queues are closed (every sender dropped) and drained:
/// then closes the stream cleanly and returns. Inbound stanzas go to `inbound`, which must
/// not block.
///
/// While the link is down, outbound stanzas wait in their queues, and the one being written
/// when the link broke is written again after the next login, so replies and pushes
/// produced during an outage are not lost.
pub async fn run(
    cfg: LinkConfig,
    mut out: Outbound,
    closing: tokio::sync::watch::Receiver<bool>,
    mut inbound: impl FnMut(Inbound),
) {
    let mut logins = 0u64;
    let mut backoff = Duration::from_millis(250);
    let mut pending: Option<Outgoing> = None;
    let (mut replies_open, mut pushes_open) = (true, true);
    loop {
        let mut link = match login(&cfg).await {
            Ok(link) => link,
            Err(e) => {
                tracing::warn!(server = %cfg.addr, error = %e, retry_in = ?backoff, "cannot connect to the server");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(cfg.max_backoff);
                continue;
            }
        };
        logins += 1;
        backoff = Duration::from_millis(250);
        tracing::info!(server = %cfg.addr, jid = %cfg.jid, "connected");
        inbound(Inbound::Connected { n: logins });
        let mut keepalive = tokio::time::interval(cfg.keepalive);
        keepalive.tick().await;
        let mut pings = 0u64;
        // Stanzas are handed to the stream's buffer as they come, and the buffer is flushed
        // once nothing else is ready: a burst of pushes or replies then leaves in a few large
        // writes instead of one system call per stanza.
        let mut unflushed = false;
        let reason = loop {
            if let Some(next) = &pending {
                if let Err(e) = link.feed(next).await {
                    break format!("write failed: {e}");
                }
                pending = None;
                unflushed = true;
            }
            if !replies_open && !pushes_open {
                // Every sender is gone: the application is shutting down.
                if let Err(e) = link.shutdown().await {
                    tracing::debug!(error = %e, "closing the stream");
                }
                tracing::info!("stream closed");
                return;
            }
            tokio::select! {
                // Replies first (they are what clients wait on), then new requests (reading
                // less when replies back up is the backpressure), then pushes.
                biased;
                r = out.replies.recv(), if replies_open => match r {
                    Some(stanza) => pending = Some(Outgoing::Stanza(stanza)),
                    None => replies_open = false,
                },
                r = read(&mut link) => match r {
                    // Shutting down: requests are answered here, so none that arrives before
                    // the stream closes goes unanswered.
                    Read::Stanza(s) if *closing.borrow() => pending = refusal(&cfg, *s).map(Outgoing::Stanza),
                    Read::Stanza(s) => inbound(Inbound::Stanza(s)),
                    Read::Malformed { kind, id, from, why } => inbound(Inbound::Malformed { kind, id, from, why }),
                    Read::Idle => {
                        pings += 1;
                        pending = Some(Outgoing::Stanza(ping(&cfg, pings)));
                    }
                    Read::Gone(reason) => break reason,
                },
                r = out.pushes.recv(), if pushes_open => match r {
                    Some(push) => pending = Some(Outgoing::Push(push)),
                    None => pushes_open = false,
                },
                _ = keepalive.tick() => {
                    pings += 1;
                    pending = Some(Outgoing::Stanza(ping(&cfg, pings)));
                }
                _ = std::future::ready(()), if unflushed => {
                    if let Err(e) = SinkExt::<&Outgoing>::flush(&mut link).await {
                        break format!("write failed: {e}");
                    }
                    unflushed = false;
                }
            }
        };
        tracing::warn!(server = %cfg.addr, %reason, "lost the server connection; reconnecting");
        inbound(Inbound::Disconnected { reason });
    }
}
