//! The plain GET path: a connection's requests are read here first, and as long as each is
//! a plain HTTP/1.1 GET (no body, no framing headers, no `Expect` or `Upgrade`, a head
//! within the bounds) it is answered here; the first that is anything else hands the
//! connection, with every byte read so far, to hyper's server for the rest of its life.
//!
//! Why a path beside hyper: held requests (event streams and long-polls) are all plain
//! GETs, and hyper gives every connection an 8 KiB read buffer and an 8 KiB write buffer
//! that it keeps for the connection's life (no setting makes them smaller), more than a
//! held request should cost in all; its dispatcher's per-request work is also most of
//! what a long-poll answer costs. Here a connection holds only the bytes not yet parsed
//! (none while a request is held), a head is encoded into a buffer dropped once written,
//! and an answer of known length goes out with its head in one write. Pulls, 304s and
//! archive documents, the face's most frequent requests, take the same path.
//!
//! What is not plain goes to hyper, which refuses malformed or oversized heads and odd
//! framing as before (`connections`); the header timeout and the graceful stop behave as
//! they do there: a head must be whole within `header_timeout` of the connection being
//! ready for it, and a stop closes idle connections at once and the others after their
//! answer. A client that closes its connection while its request is held cancels it.

use super::{MAX_HEAD, MAX_HEADERS};
use axum::body::{Body, HttpBody};
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri, Version, header};
use bytes::{Buf, Bytes};
use futures::FutureExt;
use futures::future::BoxFuture;
use http_body_util::BodyExt;
use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tower::Service;

/// What a connection serves with, and when it must stop.
pub(super) struct Plain {
    pub app: std::sync::Arc<crate::App>,
    /// The GETs the face answers without its layers.
    pub direct: std::sync::Arc<dyn super::Direct>,
    pub peer: SocketAddr,
    pub header_timeout: Duration,
    /// Turns true when the face stops.
    pub stopping: watch::Receiver<bool>,
}

/// How a connection left the plain path.
pub(super) enum Ended {
    Closed,
    /// A request that is not plain: the connection and every byte read from it but not
    /// answered, for hyper.
    ToHyper(TcpStream, Vec<u8>),
}

/// Serves `tcp`'s plain GETs until it closes or a request is not plain.
pub(super) async fn serve(mut tcp: TcpStream, plain: &mut Plain) -> Ended {
    let mut read = Vec::new();
    // The header timeout's timer, one for the connection's life: set again for each request,
    // later each time, it is moved without the timer wheel's lock (a timer made per request
    // costs that lock twice, once when made and once when dropped).
    let mut head_due = std::pin::pin!(tokio::time::sleep_until(Instant::now() + plain.header_timeout));
    loop {
        let (request, close) = match next_request(&mut tcp, &mut read, head_due.as_mut(), plain).await {
            Ok(next) => next,
            Err(Stop::Closed) => return Ended::Closed,
            Err(Stop::NotPlain) => return Ended::ToHyper(tcp, read),
            Err(Stop::TargetTooLong) => {
                let text = format!("the request line is longer than {MAX_HEAD} bytes");
                let refusal = crate::errors::ApiError::new(StatusCode::URI_TOO_LONG, "bad-request", text);
                let (head, framing, body) = head_of(axum::response::IntoResponse::into_response(refusal), true);
                read = Vec::new();
                let _ = write_response(&mut tcp, &mut read, head, framing, std::pin::pin!(body)).await;
                linger_close(tcp).await;
                return Ended::Closed;
            }
        };
        if read.is_empty() {
            // Nothing is kept while the request is held.
            read = Vec::new();
        }
        // The face is always ready (no layer of it holds requests back): called without asking,
        // on a clone made for the call. The direct answer comes boxed already.
        let call = if plain.direct.takes(&request) {
            plain.direct.get(request)
        } else {
            let routed = crate::App::clone(&plain.app).call(request);
            Box::pin(routed.map(|answer| answer.unwrap_or_else(|never: Infallible| match never {})))
        };
        let Some(response) = answer(&mut tcp, &mut read, call).await else {
            return Ended::Closed;
        };
        let close = close || *plain.stopping.borrow();
        // The head is made here, so that what a stream keeps while it is written is its body.
        let (head, framing, body) = head_of(response, close);
        let body = std::pin::pin!(body);
        if !write_response(&mut tcp, &mut read, head, framing, body).await {
            return Ended::Closed;
        }
        if close {
            let _ = tcp.shutdown().await;
            return Ended::Closed;
        }
    }
}

/// The face's answer, or `None` when the client goes away first. The face's future (`call`)
/// is boxed and dropped once it answers; an answer it gives later (a held long-poll,
/// [`super::hold`]) is waited for alone, so a held request keeps only its wait. Small
/// futures on purpose: a connection's task has room for the largest one all its life.
/// (Each `select!` here and below polls the work first: the other branch only ends it, so
/// there is no fairness to draw lots for.)
async fn answer(
    tcp: &mut TcpStream,
    read: &mut Vec<u8>,
    call: BoxFuture<'static, Response<Body>>,
) -> Option<Response<Body>> {
    let response = tokio::select! {
        biased;
        answer = call => answer,
        () = peer_gone(tcp, read) => return None,
    };
    match super::hold::split(response) {
        Err(response) => Some(response),
        Ok((added, wait)) => tokio::select! {
            biased;
            mut answer = wait => {
                super::hold::settle(&added.0, &mut answer);
                Some(answer)
            }
            () = peer_gone(tcp, read) => None,
        },
    }
}

/// Resolves when the client has closed its side although bytes it sent are still unread.
async fn closed_with_unread(tcp: &TcpStream) {
    loop {
        match tcp.ready(tokio::io::Interest::READABLE).await {
            Ok(ready) if !ready.is_read_closed() => {
                // Readable, with bytes left for later: forget this readiness and wait for the
                // next change (more bytes, or the peer's FIN, which sets the closed state).
                let _ =
                    tcp.try_io(tokio::io::Interest::READABLE, || Err::<(), _>(std::io::ErrorKind::WouldBlock.into()));
            }
            _ => return,
        }
    }
}

/// Closes a connection whose client may still be sending: the write side first, then what
/// arrives is read and dropped for a moment (bounded in time and bytes), since closing with
/// unread bytes makes the kernel reset the connection, and a reset can destroy the answer
/// before the client has read it.
async fn linger_close(mut tcp: TcpStream) {
    let _ = tcp.shutdown().await;
    let drain = async {
        let mut sink = [0u8; 4096];
        let mut left = 256 * 1024usize;
        while let Ok(n @ 1..) = tcp.read(&mut sink).await {
            left = left.saturating_sub(n);
            if left == 0 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}

/// Why no request is served here.
enum Stop {
    Closed,
    NotPlain,
    /// The head's bound went by before the request line ended: 414, and the connection closed.
    TargetTooLong,
}

/// Reads until the next request's head is whole (within the header timeout, `due`): the
/// request and whether the client asked to close after it. Closed when the client closes,
/// the timeout runs out, or the face stops while nothing is read.
async fn next_request(
    tcp: &mut TcpStream,
    read: &mut Vec<u8>,
    mut due: Pin<&mut tokio::time::Sleep>,
    plain: &mut Plain,
) -> Result<(Request<Body>, bool), Stop> {
    due.as_mut().reset(Instant::now() + plain.header_timeout);
    loop {
        if !read.is_empty() {
            match parse(read, plain.peer) {
                Ok((request, close, len)) => {
                    read.drain(..len);
                    return Ok((request, close));
                }
                Err(Unparsed::Partial) if read.len() < MAX_HEAD => {}
                Err(Unparsed::Partial) if !read.contains(&b'\n') => return Err(Stop::TargetTooLong),
                Err(_) => return Err(Stop::NotPlain),
            }
        } else if *plain.stopping.borrow() {
            return Err(Stop::Closed);
        }
        if read.capacity() - read.len() < 512 {
            read.reserve(1024);
        }
        tokio::select! {
            biased;
            got = tcp.read_buf(read) => match got {
                Ok(n) if n > 0 => {}
                _ => return Err(Stop::Closed),
            },
            () = due.as_mut() => return Err(Stop::Closed),
            _ = plain.stopping.changed(), if read.is_empty() => return Err(Stop::Closed),
        }
    }
}

/// Resolves when the client closes its connection (or it fails); bytes it sends meanwhile
/// (a pipelined request) are kept in `read`, up to a head's bound. Past the bound they are
/// left unread in the socket, and the client's leaving is seen from the socket's readiness
/// (the peer's FIN) rather than from a read: otherwise a held request whose client sent that
/// much and left would keep its place until its timeout.
async fn peer_gone(tcp: &mut TcpStream, read: &mut Vec<u8>) {
    loop {
        if read.len() >= MAX_HEAD {
            return closed_with_unread(tcp).await;
        }
        match tcp.read_buf(read).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Why `bytes` give no request yet.
enum Unparsed {
    Partial,
    NotPlain,
}

/// The request whose head starts `bytes`, if it is a plain GET: the request, whether the
/// client asked to close after it, and the length of its head.
fn parse(bytes: &[u8], peer: SocketAddr) -> Result<(Request<Body>, bool, usize), Unparsed> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut slots);
    let len = match head.parse(bytes) {
        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD => len,
        Ok(httparse::Status::Partial) => return Err(Unparsed::Partial),
        _ => return Err(Unparsed::NotPlain),
    };
    if head.method != Some("GET") || head.version != Some(1) {
        return Err(Unparsed::NotPlain);
    }
    let Some(uri) = head.path.filter(|p| p.starts_with('/')).and_then(|p| Uri::try_from(p).ok()) else {
        return Err(Unparsed::NotPlain);
    };
    let mut headers = HeaderMap::with_capacity(head.headers.len());
    let mut close = false;
    for h in head.headers.iter() {
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(h.name.as_bytes()), HeaderValue::from_bytes(h.value))
        else {
            return Err(Unparsed::NotPlain);
        };
        if [header::CONTENT_LENGTH, header::TRANSFER_ENCODING, header::EXPECT, header::UPGRADE].contains(&name) {
            return Err(Unparsed::NotPlain);
        }
        if name == header::CONNECTION {
            for token in value.to_str().unwrap_or("?").split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    close = true;
                } else if !token.eq_ignore_ascii_case("keep-alive") {
                    return Err(Unparsed::NotPlain);
                }
            }
        }
        headers.append(name, value);
    }
    let mut request = Request::new(Body::empty());
    *request.method_mut() = Method::GET;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = headers;
    request.extensions_mut().insert(ConnectInfo(peer));
    Ok((request, close, len))
}

/// How an answer's body is delimited.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Framing {
    /// No body (1xx, 204, 304).
    None,
    /// By the `Content-Length` the answer carries.
    Given,
    /// By a `Content-Length` of this many bytes, added here.
    Length(u64),
    Chunked,
}

fn framing(status: StatusCode, headers: &HeaderMap, exact: Option<u64>) -> Framing {
    if status.is_informational() || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        Framing::None
    } else if headers.contains_key(header::CONTENT_LENGTH) {
        Framing::Given
    } else if let Some(n) = exact {
        Framing::Length(n)
    } else {
        Framing::Chunked
    }
}

/// The answer's status line and headers, with `date`, its framing and `connection: close`
/// when the connection closes after it.
fn encode_head(status: StatusCode, headers: &HeaderMap, framing: Framing, close: bool) -> Vec<u8> {
    let mut head = Vec::with_capacity(160 + headers.len() * 48);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        // An answer without a body has no length to give (RFC 9110 §8.6: a 304's would be
        // the 200's, which the router's zero is not).
        if framing == Framing::None && name == header::CONTENT_LENGTH {
            continue;
        }
        line(&mut head, name.as_str().as_bytes(), value.as_bytes());
    }
    if !headers.contains_key(header::DATE) {
        line(&mut head, b"date", &http_date());
    }
    match framing {
        Framing::Length(n) => line(&mut head, b"content-length", n.to_string().as_bytes()),
        Framing::Chunked => line(&mut head, b"transfer-encoding", b"chunked"),
        Framing::Given | Framing::None => {}
    }
    if close {
        line(&mut head, b"connection", b"close");
    }
    head.extend_from_slice(b"\r\n");
    head
}

fn line(head: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    head.extend_from_slice(name);
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

/// Now as an HTTP date, formatted once a second per thread.
fn http_date() -> [u8; 29] {
    thread_local!(static NOW: std::cell::Cell<(u64, [u8; 29])> = const { std::cell::Cell::new((u64::MAX, [0; 29])) });
    let now = SystemTime::now();
    let second = now.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    NOW.with(|cached| {
        let (at, text) = cached.get();
        if at == second {
            return text;
        }
        let mut text = [0u8; 29];
        text.copy_from_slice(&httpdate::fmt_http_date(now).as_bytes()[..29]);
        cached.set((second, text));
        text
    })
}

/// `response`'s head, encoded, its framing and its body.
fn head_of<B: HttpBody>(response: Response<B>, close: bool) -> (Bytes, Framing, B) {
    let (parts, body) = response.into_parts();
    let framing = framing(parts.status, &parts.headers, body.size_hint().exact());
    (Bytes::from(encode_head(parts.status, &parts.headers, framing, close)), framing, body)
}

/// Writes an answer; false when the connection failed or was closed meanwhile.
async fn write_response<B: HttpBody<Data = Bytes>>(
    tcp: &mut TcpStream,
    read: &mut Vec<u8>,
    mut head: Bytes,
    framing: Framing,
    mut body: Pin<&mut B>,
) -> bool {
    if framing == Framing::None {
        return tcp.write_all_buf(&mut head).await.is_ok();
    }
    if framing == Framing::Chunked {
        if tcp.write_all_buf(&mut head).await.is_err() {
            return false;
        }
        // Not kept for the life of a stream.
        head = Bytes::new();
    }
    loop {
        let frame = tokio::select! {
            biased;
            frame = body.frame() => frame,
            () = peer_gone(tcp, read) => return false,
        };
        let data = match frame {
            None => break,
            Some(Err(_)) => return false,
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(_trailers) => continue,
            },
        };
        let written = if framing == Framing::Chunked {
            if data.is_empty() {
                continue;
            }
            // The chunk's size line, written where it stands: no allocation per event.
            let mut size = [0u8; 18];
            let used = {
                let mut rest = &mut size[..];
                let _ = write!(rest, "{:x}\r\n", data.len());
                18 - rest.len()
            };
            tcp.write_all_buf(&mut Buf::chain(&size[..used], data).chain(&b"\r\n"[..])).await
        } else {
            // The head goes out with the first data, in one write.
            tcp.write_all_buf(&mut (&mut head).chain(data)).await
        };
        if written.is_err() {
            return false;
        }
    }
    match framing {
        Framing::Chunked => tcp.write_all(b"0\r\n\r\n").await.is_ok(),
        _ => !head.has_remaining() || tcp.write_all_buf(&mut head).await.is_ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> SocketAddr {
        "127.0.0.1:1".parse().unwrap()
    }

    fn plain(bytes: &[u8]) -> (Request<Body>, bool, usize) {
        match parse(bytes, peer()) {
            Ok(plain) => plain,
            Err(Unparsed::Partial) => panic!("partial: {:?}", String::from_utf8_lossy(bytes)),
            Err(Unparsed::NotPlain) => panic!("not plain: {:?}", String::from_utf8_lossy(bytes)),
        }
    }

    fn not_plain(bytes: &[u8]) -> bool {
        matches!(parse(bytes, peer()), Err(Unparsed::NotPlain))
    }

    #[test]
    fn a_plain_get_is_parsed_with_its_headers_peer_and_length() {
        let bytes =
            b"GET /feeds/a/?max=5 HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\nX-A: 1\r\nX-A: 2\r\n\r\nGET /";
        let (request, close, len) = plain(bytes);
        assert_eq!(len, bytes.len() - 5);
        assert!(!close);
        assert_eq!(request.uri().path(), "/feeds/a/");
        assert_eq!(request.uri().query(), Some("max=5"));
        assert_eq!(request.headers()[header::ACCEPT], "text/event-stream");
        assert_eq!(request.headers().get_all("x-a").iter().count(), 2);
        assert_eq!(request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0), Some(peer()));
        let (_, close, _) = plain(b"GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n");
        assert!(close);
    }

    #[test]
    fn a_head_not_yet_whole_is_partial() {
        assert!(matches!(parse(b"GET /feeds/a/ HTTP/1.1\r\nHost: x\r\n", peer()), Err(Unparsed::Partial)));
    }

    #[test]
    fn anything_but_a_plain_get_goes_to_hyper() {
        for bytes in [
            &b"PUT /feeds/a/items/x HTTP/1.1\r\nContent-Length: 0\r\n\r\n"[..],
            b"HEAD /feeds/a/ HTTP/1.1\r\n\r\n",
            b"GET /feeds/a/ HTTP/1.0\r\n\r\n",
            b"GET /feeds/a/ HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
            b"GET /feeds/a/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            b"GET /feeds/a/ HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            b"GET /feeds/a/ HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            b"GET http://x/feeds/a/ HTTP/1.1\r\n\r\n",
            b"GET /feeds/a\x01b HTTP/1.1\r\n\r\n",
            b"GET /feeds/a/ HTTP/1.1\r\nX-Folded: a\r\n b\r\n\r\n",
            b"GET /feeds/a/ HTTP/1.1\r\nX-Space : a\r\n\r\n",
        ] {
            assert!(not_plain(bytes), "{:?}", String::from_utf8_lossy(bytes));
        }
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-H{i}: v\r\n")).collect();
        assert!(not_plain(format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes()));
        let long = format!("GET /?a={} HTTP/1.1\r\n\r\n", "a".repeat(MAX_HEAD));
        assert!(not_plain(long.as_bytes()));
    }

    #[test]
    fn heads_are_framed_by_length_chunks_or_nothing() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let head = String::from_utf8(encode_head(StatusCode::OK, &headers, Framing::Length(37), false)).unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ndate: "), "{head}");
        assert!(head.ends_with(" GMT\r\ncontent-length: 37\r\n\r\n"), "{head}");
        assert_eq!(framing(StatusCode::OK, &headers, None), Framing::Chunked);
        let head = String::from_utf8(encode_head(StatusCode::OK, &headers, Framing::Chunked, true)).unwrap();
        assert!(head.ends_with("transfer-encoding: chunked\r\nconnection: close\r\n\r\n"), "{head}");
        assert_eq!(framing(StatusCode::NOT_MODIFIED, &headers, Some(0)), Framing::None);
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("3"));
        assert_eq!(framing(StatusCode::OK, &headers, Some(3)), Framing::Given);
        let head = String::from_utf8(encode_head(StatusCode::OK, &headers, Framing::Given, false)).unwrap();
        assert_eq!(head.matches("content-length").count(), 1, "{head}");
    }

    #[test]
    fn the_date_is_an_http_date_of_now() {
        let date = http_date();
        let parsed = httpdate::parse_http_date(std::str::from_utf8(&date).unwrap()).unwrap();
        let off = SystemTime::now().duration_since(parsed).unwrap();
        assert!(off < Duration::from_secs(2), "{off:?}");
    }
}
