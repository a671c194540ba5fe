//! A raw XEP-0114 external component for tests and tools: it connects to the server's
//! component port as a domain (`feeds.localhost`) without smartfeeds, proving the server
//! setup end to end, and serves as a scripted peer (sink, load source) later.
//!
//! Handshake: `<stream:stream xmlns="jabber:component:accept" to="DOMAIN">`, the server's
//! header carries a stream id, we send `<handshake>hex(SHA-1(id + secret))</handshake>`, the
//! server answers `<handshake/>` (or a `<stream:error/>` such as `not-authorized` or
//! `conflict`).
//!
//! Stanzas are seen and written in `jabber:client` like the client's (translated to
//! `jabber:component:accept` on the wire), and `from` defaults to the component's domain,
//! which Prosody requires. Everything else is the shared [`Connection`], through `Deref`.

use std::ops::{Deref, DerefMut};

use tokio::io::BufStream;
use tokio::net::TcpStream;
use tokio_xmpp::xmlstream::{StreamHeader, initiate_stream};
use xmpp_parsers::component::Handshake;

use super::connection::{Connection, REPLY_TIMEOUT, read_one, timeouts, write_one};
use super::xml::{NS_COMPONENT, hex, to_xml, xml};

/// A connected, authenticated component (see the module docs).
pub struct Component {
    domain: String,
    conn: Connection,
}

impl Component {
    /// Connects to `127.0.0.1:port` as `domain` with the shared `secret`; panics with the
    /// reason on failure.
    pub async fn connect(port: u16, domain: &str, secret: &str) -> Component {
        match Self::try_connect(port, domain, secret).await {
            Ok(component) => component,
            Err(e) => panic!("component {domain} could not connect on 127.0.0.1:{port}: {e}"),
        }
    }

    /// Like [`connect`](Self::connect), returning the reason (e.g. `not-authorized` for a
    /// wrong secret, `conflict` when the domain is already connected).
    pub async fn try_connect(port: u16, domain: &str, secret: &str) -> Result<Component, String> {
        let tcp = tokio::time::timeout(REPLY_TIMEOUT, TcpStream::connect(("127.0.0.1", port)))
            .await
            .map_err(|_| "TCP connect timed out".to_string())?
            .map_err(|e| format!("TCP connect failed: {e}"))?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        let header = StreamHeader { to: Some(domain.to_string().into()), from: None, id: None };
        let mut pending = initiate_stream(BufStream::new(tcp), NS_COMPONENT, header, timeouts())
            .await
            .map_err(|e| format!("stream header exchange failed: {e}"))?;
        let stream_id = pending.take_header().id.ok_or("the server's stream header has no id")?.into_owned();
        // XEP-0114 streams have no <stream:features/>.
        let mut stream = pending.skip_features();
        write_one(&mut stream, &xml(&handshake(&stream_id, secret))).await?;
        let reply = read_one(&mut stream, "the handshake reply").await?;
        if !reply.is("handshake", NS_COMPONENT) {
            return Err(format!("handshake refused: {}", to_xml(&reply)));
        }
        Ok(Component {
            domain: domain.to_string(),
            conn: Connection::spawn(stream, domain.to_string(), NS_COMPONENT, Some(domain.to_string())),
        })
    }

    /// The component's domain.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// Closes the stream cleanly.
    pub async fn close(self) {
        self.conn.close().await
    }
}

/// The `<handshake/>` element for a stream id and secret: lowercase hex SHA-1 of `id + secret`
/// (computed by xmpp-parsers' `Handshake`).
pub fn handshake(stream_id: &str, secret: &str) -> String {
    let digest = Handshake::from_stream_id_and_password(stream_id.to_string(), secret)
        .data
        .expect("a client handshake carries a digest");
    format!(r#"<handshake xmlns="{NS_COMPONENT}">{}</handshake>"#, hex(&digest))
}

impl Deref for Component {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl DerefMut for Component {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
}
