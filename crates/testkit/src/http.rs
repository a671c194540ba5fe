//! smartfeeds' HTTP face as the end-to-end tests reach it: the bearer tokens of the demo
//! users, the `[http]` table that gives them, a shared fixture whose smartfeeds serves HTTP,
//! a PUT of an Atom entry, and a reader of event streams.
//!
//! ```ignore
//! static SHARED: Shared<HttpFixture> = Shared::new();
//! let sh = SHARED.get_or_start(|| {
//!     HttpFixture::start(|port| format!("{}{}", http_table(port, "", &["bot"]), bot_feeds(&["news"])))
//! });
//! let res = put_entry(&reqwest::Client::new(), &sh.base, "news", "n1", BOT, &small_entry("n1")).await;
//! ```

use std::time::Duration;

use super::fixture::Fixture;
use super::server::start_selected;

/// The HTTP bearer token of `bot@localhost`.
pub const BOT: &str = "bot-token-0123456789";
/// The HTTP bearer token of `admin@localhost`.
pub const ADMIN: &str = "admin-token-0123456789";
/// The HTTP bearer token of `alice@localhost`.
pub const ALICE: &str = "alice-token-0123456789";
/// The HTTP bearer token of `eve@localhost`: as long as alice's, and different.
pub const EVE: &str = "eve-token-0123456789ab";

/// The token of the demo user `user` (`bot`, `admin`, `alice` or `eve`).
pub fn token(user: &str) -> &'static str {
    match user {
        "bot" => BOT,
        "admin" => ADMIN,
        "alice" => ALICE,
        "eve" => EVE,
        _ => panic!("no HTTP token for {user:?}: the tests have tokens for bot, admin, alice and eve"),
    }
}

/// The `[http]` table: listening on `127.0.0.1:port`, with the keys `settings` (TOML lines,
/// or none), and a `[[http.tokens]]` table for each of the demo `users` ([`token`]).
pub fn http_table(port: u16, settings: &str, users: &[&str]) -> String {
    let mut table = format!("[http]\nlisten = \"127.0.0.1:{port}\"\n{settings}");
    for user in users {
        table.push_str(&format!("[[http.tokens]]\njid = \"{user}@localhost\"\ntoken = \"{}\"\n", token(user)));
    }
    table
}

/// A [`Fixture`] whose smartfeeds also serves HTTP, on a free loopback port.
pub struct HttpFixture {
    pub fx: Fixture,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

impl HttpFixture {
    /// A fresh server and smartfeeds with the tables `tables(port)` returns for a free
    /// `port`: they have the `[http]` table listening there (see [`http_table`]). The port
    /// is picked once the server is up, so it is free for as short a time as can be, and
    /// picked again if another process takes it first ([`Fixture::on_free_ports`]).
    pub fn start(tables: impl Fn(u16) -> String) -> HttpFixture {
        HttpFixture::start_with_metrics(|port, _| tables(port)).0
    }

    /// Like [`start`](Self::start), with a second free port for smartfeeds' metrics:
    /// `tables(http, metrics)`; the fixture and the metrics port.
    pub fn start_with_metrics(tables: impl Fn(u16, u16) -> String) -> (HttpFixture, u16) {
        let (fx, ports) = Fixture::on_free_ports(start_selected(), 2, |p| tables(p[0], p[1]));
        (HttpFixture { fx, base: format!("http://127.0.0.1:{}", ports[0]) }, ports[1])
    }

    /// The URL of `path` (`/feeds/…`) on the HTTP face.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

/// PUTs the Atom `entry` as the item `id` of `feed` through the HTTP face at `base`
/// (`http://127.0.0.1:PORT`), with the bearer `token`.
pub async fn put_entry(
    client: &reqwest::Client,
    base: &str,
    feed: &str,
    id: &str,
    token: &str,
    entry: &str,
) -> reqwest::Result<reqwest::Response> {
    client
        .put(format!("{base}/feeds/{feed}/items/{id}"))
        .bearer_auth(token)
        .header("content-type", "application/atom+xml")
        .body(entry.to_string())
        .send()
        .await
}

/// Reads server-sent events (id, event, data) from a response until `n` are read; `buf` keeps
/// what was received past the last of them, for the next call.
pub async fn sse_events(
    res: &mut reqwest::Response,
    buf: &mut String,
    n: usize,
) -> Vec<(String, String, serde_json::Value)> {
    let mut out = Vec::new();
    while out.len() < n {
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let (mut id, mut ev, mut data) = (String::new(), String::new(), String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id: ").or(line.strip_prefix("id:")) {
                    id = v.to_string();
                } else if let Some(v) = line.strip_prefix("event: ").or(line.strip_prefix("event:")) {
                    ev = v.to_string();
                } else if let Some(v) = line.strip_prefix("data: ").or(line.strip_prefix("data:")) {
                    data.push_str(v);
                }
            }
            if !data.is_empty() {
                out.push((id, ev, serde_json::from_str(&data).expect("JSON data")));
            }
        }
        if out.len() >= n {
            break;
        }
        let chunk = tokio::time::timeout(Duration::from_secs(10), res.chunk()).await.expect("an event in time");
        buf.push_str(&String::from_utf8_lossy(&chunk.expect("stream").expect("not ended")));
    }
    out
}
