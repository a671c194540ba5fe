//! A minimal XMPP client for tests: plain TCP to 127.0.0.1 (no TLS), SASL PLAIN, resource
//! binding, initial presence. Everything else is the shared [`Connection`] (reached through
//! `Deref`): `send`, `iq`, `next_message`, `close`, …
//!
//! Built on tokio-xmpp's low-level `xmlstream` (the XML framing only): its high-level
//! `Client` reconnects on its own and hides the wire, which a test must see.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::BufStream;
use tokio::net::TcpStream;
use tokio_xmpp::xmlstream::{StreamHeader, initiate_stream};

use super::connection::{Connection, Stream, read_one, timeouts, write_one};
use super::xml::{NS_CLIENT, base64, stanza_type, to_xml, with_attr, xml};

const NS_SASL: &str = "urn:ietf:params:xml:ns:xmpp-sasl";
const NS_BIND: &str = "urn:ietf:params:xml:ns:xmpp-bind";

static RESOURCE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A logged-in client session (see the module docs).
pub struct Client {
    jid: String,
    conn: Connection,
}

impl Client {
    /// Logs `jid` (`user@domain` or `user@domain/resource`) in on `127.0.0.1:port`: SASL
    /// PLAIN, bind, initial presence, and one ping round trip so the server has processed
    /// the presence before this returns. Panics with the reason on failure.
    pub async fn connect(port: u16, jid: &str, password: &str) -> Client {
        match Self::try_connect(port, jid, password).await {
            Ok(client) => client,
            Err(e) => panic!("client {jid} could not log in on 127.0.0.1:{port}: {e}"),
        }
    }

    /// Like [`connect`](Self::connect), returning the reason instead of panicking (wrong
    /// password, server down, …).
    pub async fn try_connect(port: u16, jid: &str, password: &str) -> Result<Client, String> {
        let (bare, resource) = match jid.split_once('/') {
            Some((bare, resource)) => (bare, Some(resource.to_string())),
            None => (jid, None),
        };
        let (user, domain) = bare.split_once('@').ok_or_else(|| format!("client JID {jid:?} has no user part"))?;
        let resource = resource.unwrap_or_else(|| {
            format!("test-{}-{}", std::process::id(), RESOURCE_COUNTER.fetch_add(1, Ordering::Relaxed))
        });

        let tcp = tokio::time::timeout(super::connection::REPLY_TIMEOUT, TcpStream::connect(("127.0.0.1", port)))
            .await
            .map_err(|_| "TCP connect timed out".to_string())?
            .map_err(|e| format!("TCP connect failed: {e}"))?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;

        // Stream, features, SASL PLAIN.
        let mut stream = open_stream(BufStream::new(tcp), domain).await?;
        let mut auth = xml(&format!(
            r#"<auth xmlns="{NS_SASL}" mechanism="PLAIN">{}</auth>"#,
            base64(format!("\0{user}\0{password}").as_bytes())
        ));
        if password.is_empty() {
            // RFC 6120: an empty initial response is sent as "=".
            auth = xml(&format!(r#"<auth xmlns="{NS_SASL}" mechanism="PLAIN">=</auth>"#));
        }
        write_one(&mut stream, &auth).await?;
        let outcome = read_one(&mut stream, "the SASL outcome").await?;
        if !outcome.is("success", NS_SASL) {
            return Err(format!("SASL PLAIN refused: {}", to_xml(&outcome)));
        }

        // Restart the stream, bind.
        let mut stream = reopen_stream(stream, domain).await?;
        let bind = xml(&format!(
            r#"<iq type="set" id="bind"><bind xmlns="{NS_BIND}"><resource>{}</resource></bind></iq>"#,
            escape(&resource)
        ));
        write_one(&mut stream, &bind).await?;
        let bound = read_one(&mut stream, "the bind result").await?;
        let full_jid = bound
            .get_child("bind", NS_BIND)
            .and_then(|b| b.get_child("jid", NS_BIND))
            .map(|j| j.text())
            .filter(|_| stanza_type(&bound) == "result")
            .ok_or_else(|| format!("resource binding failed: {}", to_xml(&bound)))?;

        let mut conn = Connection::spawn(stream, full_jid.clone(), NS_CLIENT, None);
        conn.try_send(xml("<presence/>")).await?;
        let ping = with_attr(xml(r#"<iq type="get"><ping xmlns="urn:xmpp:ping"/></iq>"#), "to", domain);
        let pong = conn.try_iq(ping, super::connection::REPLY_TIMEOUT).await?;
        if stanza_type(&pong) != "result" {
            return Err(format!("server ping failed: {}", to_xml(&pong)));
        }
        Ok(Client { jid: full_jid, conn })
    }

    /// The bound full JID (`alice@localhost/test-…`).
    pub fn jid(&self) -> &str {
        &self.jid
    }

    /// The bare JID (`alice@localhost`).
    pub fn bare_jid(&self) -> &str {
        self.jid.split_once('/').map_or(self.jid.as_str(), |(bare, _)| bare)
    }
}

impl Deref for Client {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl DerefMut for Client {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
}

impl Client {
    /// Closes the stream cleanly.
    pub async fn close(self) {
        self.conn.close().await
    }
}

async fn open_stream(io: BufStream<TcpStream>, domain: &str) -> Result<Stream, String> {
    let pending = initiate_stream(io, NS_CLIENT, header(domain), timeouts())
        .await
        .map_err(|e| format!("stream header exchange failed: {e}"))?;
    let (_features, stream) = pending.recv_features().await.map_err(|e| format!("no stream features: {e}"))?;
    Ok(stream)
}

async fn reopen_stream(stream: Stream, domain: &str) -> Result<Stream, String> {
    let pending =
        stream.initiate_reset().send_header(header(domain)).await.map_err(|e| format!("stream restart failed: {e}"))?;
    let (features, stream) =
        pending.recv_features().await.map_err(|e| format!("no stream features after SASL: {e}"))?;
    if features.bind.is_none() {
        return Err("server offers no resource binding".into());
    }
    Ok(stream)
}

fn header(domain: &str) -> StreamHeader<'static> {
    StreamHeader { to: Some(domain.to_string().into()), from: None, id: None }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
