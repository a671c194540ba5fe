//! A web server of feed documents the test controls (SPEC §13's sources): axum on a free
//! loopback port, on a thread and runtime of its own (so a fixture shared by the tests of
//! a binary keeps it). Each path answers what the test last set for it (status, body,
//! headers, a delay, gzip), honours `If-None-Match` with 304, and records every request.
//!
//! ```ignore
//! let web = SourceServer::start();
//! web.set("/feed.xml", Doc::atom(&atom_feed(&[...])));
//! let url = web.url("/feed.xml");
//! web.wait_hits("/feed.xml", 2);
//! ```

use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one path answers.
#[derive(Clone, Debug, Default)]
pub struct Doc {
    pub status: u16,
    pub body: Vec<u8>,
    pub content_type: String,
    /// Sent as `ETag`; a request with it in `If-None-Match` gets 304.
    pub etag: Option<String>,
    /// Sent as `Location` (for redirects).
    pub location: Option<String>,
    /// Extra headers (`Link`, …).
    pub headers: Vec<(String, String)>,
    /// How long to wait before answering.
    pub delay: Duration,
    /// Whether the body is sent gzip-compressed (`Content-Encoding: gzip`) to a request
    /// whose `Accept-Encoding` allows it (as is, to one that does not).
    pub gzip: bool,
}

impl Doc {
    /// `200` with an Atom document and an ETag derived from its bytes.
    pub fn atom(body: &str) -> Doc {
        Doc::typed("application/atom+xml", body)
    }

    /// `200` with `body` as `content_type`, and an ETag derived from its bytes.
    pub fn typed(content_type: &str, body: &str) -> Doc {
        Doc {
            status: 200,
            body: body.as_bytes().to_vec(),
            content_type: content_type.to_string(),
            etag: Some(format!("\"{:08x}\"", crc32fast::hash(body.as_bytes()))),
            ..Doc::default()
        }
    }

    /// A bare status.
    pub fn status(status: u16) -> Doc {
        Doc { status, ..Doc::default() }
    }

    /// A redirect to `to`.
    pub fn redirect(status: u16, to: &str) -> Doc {
        Doc { status, location: Some(to.to_string()), ..Doc::default() }
    }
}

/// One request received (recorded when it arrives).
#[derive(Clone, Debug)]
pub struct Hit {
    pub headers: HeaderMap,
    /// What was answered.
    pub status: u16,
    /// Whether the body was sent gzip-compressed.
    pub gzipped: bool,
    pub at: Instant,
}

#[derive(Default)]
struct Inner {
    docs: HashMap<String, Doc>,
    hits: HashMap<String, Vec<Hit>>,
}

pub struct SourceServer {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    inner: Arc<Mutex<Inner>>,
}

impl SourceServer {
    pub fn start() -> SourceServer {
        SourceServer::start_on(std::net::Ipv4Addr::LOCALHOST)
    }

    /// [`start`](Self::start) on another loopback address (`127.0.0.2`, …).
    pub fn start_on(ip: std::net::Ipv4Addr) -> SourceServer {
        let inner: Arc<Mutex<Inner>> = Arc::default();
        let state = inner.clone();
        let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap| answer(state.clone(), uri, headers));
        let port = serve_on_thread(ip, app);
        SourceServer { base: format!("http://{ip}:{port}"), inner }
    }

    /// The URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Makes `path` answer `doc` from now on.
    pub fn set(&self, path: &str, doc: Doc) {
        self.inner.lock().unwrap().docs.insert(path.to_string(), doc);
    }

    /// The requests of `path` so far.
    pub fn hits(&self, path: &str) -> Vec<Hit> {
        self.inner.lock().unwrap().hits.get(path).cloned().unwrap_or_default()
    }

    /// Waits until `path` has had at least `n` requests (20 s at most); returns them.
    pub fn wait_hits(&self, path: &str, n: usize) -> Vec<Hit> {
        self.wait_hits_within(path, n, Duration::from_secs(20))
    }

    /// Waits until `path` has had at least `n` requests (`limit` at most); returns them.
    pub fn wait_hits_within(&self, path: &str, n: usize, limit: Duration) -> Vec<Hit> {
        let deadline = Instant::now() + limit;
        loop {
            let hits = self.hits(path);
            if hits.len() >= n {
                return hits;
            }
            assert!(Instant::now() < deadline, "{path} had {} requests, not {n}, within {limit:?}", hits.len());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

async fn answer(inner: Arc<Mutex<Inner>>, uri: Uri, headers: HeaderMap) -> Response {
    let path = uri.path_and_query().map_or_else(|| uri.path().to_string(), |p| p.as_str().to_string());
    let doc = inner.lock().unwrap().docs.get(&path).cloned();
    let Some(doc) = doc else {
        record(&inner, &path, headers, 404, false);
        return StatusCode::NOT_FOUND.into_response();
    };
    let not_modified = doc.status == 200
        && doc.etag.as_deref().is_some_and(|e| {
            headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains(e))
        });
    let status = if not_modified { 304 } else { doc.status };
    let gzipped = status == 200 && doc.gzip && accepts_gzip(&headers);
    // Recorded on arrival: a test counts fetches that are still being answered.
    record(&inner, &path, headers, status, gzipped);
    tokio::time::sleep(doc.delay).await;
    let mut resp = if not_modified || doc.status != 200 {
        StatusCode::from_u16(status).unwrap_or(StatusCode::OK).into_response()
    } else if gzipped {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(&doc.body).expect("gzip in memory");
        let body = enc.finish().expect("gzip in memory");
        (StatusCode::OK, [(header::CONTENT_ENCODING, "gzip")], body).into_response()
    } else {
        (StatusCode::OK, doc.body.clone()).into_response()
    };
    let h = resp.headers_mut();
    let mut put = |name: &str, value: &str| {
        if let (Ok(n), Ok(v)) = (header::HeaderName::try_from(name), HeaderValue::from_str(value)) {
            h.append(n, v);
        }
    };
    if !doc.content_type.is_empty() {
        put("content-type", &doc.content_type);
    }
    if let Some(e) = &doc.etag {
        put("etag", e);
    }
    if let Some(l) = &doc.location {
        put("location", l);
    }
    for (k, v) in &doc.headers {
        put(k, v);
    }
    resp
}

fn record(inner: &Arc<Mutex<Inner>>, path: &str, headers: HeaderMap, status: u16, gzipped: bool) {
    let hit = Hit { headers, status, gzipped, at: Instant::now() };
    inner.lock().unwrap().hits.entry(path.to_string()).or_default().push(hit);
}

/// Whether a request's `Accept-Encoding` allows gzip (named, or `*`, without `q=0`).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers.get_all(header::ACCEPT_ENCODING).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(
        |coding| {
            let mut parts = coding.split(';').map(str::trim);
            let name = parts.next().unwrap_or("").to_ascii_lowercase();
            let refused = parts.any(|p| p.replace(' ', "").eq_ignore_ascii_case("q=0") || p == "q=0.0");
            (name == "gzip" || name == "*") && !refused
        },
    )
}

/// Serves `app` on a free port of `ip` from a thread and runtime of its own, so it keeps
/// answering whichever test's runtime started it; returns the port.
pub(crate) fn serve_on_thread(ip: std::net::Ipv4Addr, app: axum::Router) -> u16 {
    let listener = std::net::TcpListener::bind((ip, 0)).expect("a loopback port for a test server");
    let port = listener.local_addr().expect("an address").port();
    listener.set_nonblocking(true).expect("a non-blocking listener");
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
            let _ = axum::serve(listener, app).await;
        });
    });
    port
}
