//! Several smartfeeds processes on one PostgreSQL database (SPEC §12), for the end-to-end
//! tests of instances sharing a component domain: a fresh database on the private
//! PostgreSQL server of the test binary, and instances of one configuration (the feed
//! `shared`, `bot@localhost` its publisher, over XMPP and through its HTTP token [`BOT`]),
//! each told which server addresses to try and where its HTTP face listens.
//!
//! ```ignore
//! let url = fresh_database().await;
//! let a = instance(&host, &url, free_port()).await;          // a dead address, then host's
//! let b = instance_on(&node_b, &url, &[node_b.component_addr()], http, "").await;
//! ```

use std::collections::HashSet;
use std::time::{Duration, Instant};

use reqwest::StatusCode;

use super::client::Client;
use super::http::{BOT, http_table, put_entry};
use super::logs;
use super::postgres_server::TempServer;
use super::process::free_port;
use super::pubsub::small_entry;
use super::push::parse_push;
use super::server::{Server, TestServer};
use super::smartfeeds::{Smartfeeds, bot_feeds};

/// A fresh database on the test binary's private PostgreSQL server.
pub async fn fresh_database() -> String {
    TempServer::shared().create_database().await.unwrap_or_else(|e| panic!("{e}"))
}

/// An instance on the database `url` that tries a dead address first and then `host`'s
/// component port, its HTTP face on `http`; returns once the HTTP face answers.
pub async fn instance(host: &TestServer, url: &str, http: u16) -> Smartfeeds {
    let servers = [format!("127.0.0.1:{}", free_port()), host.component_addr()];
    instance_on(host, url, &servers, http, "").await
}

/// An instance on the database `url` with `host`'s secret, trying the component ports
/// `servers` in turn, its HTTP face on `http`, `tables` (e.g. `[metrics]`) appended to the
/// shared configuration; returns once the HTTP face answers. smartfeeds' readiness probe
/// logs in to `host`: where other instances serve the domain too, the probe may be answered
/// by one of them (see [`wait_logged`] for the instance's own link).
pub async fn instance_on<S: Server + ?Sized>(
    host: &TestServer<S>,
    url: &str,
    servers: &[String],
    http: u16,
    tables: &str,
) -> Smartfeeds {
    instance_with(host, url, servers, http, "", tables).await
}

/// [`instance_on`] with the keys `http_settings` (TOML lines, e.g. `base_url = …`) in its
/// `[http]` table.
pub async fn instance_with<S: Server + ?Sized>(
    host: &TestServer<S>,
    url: &str,
    servers: &[String],
    http: u16,
    http_settings: &str,
    tables: &str,
) -> Smartfeeds {
    let secret = host.secret().to_string();
    let sf = Smartfeeds::start_config(host, |_| {
        format!(
            r#"admins = ["admin@localhost"]
[component]
jid = "feeds.localhost"
secret = "{secret}"
server = {servers:?}
[store]
url = "{url}"
{}[hub]
allow_private_callbacks = true
{}{tables}"#,
            http_table(http, http_settings, &["bot"]),
            bot_feeds(&["shared"]),
        )
    });
    http_ready(&sf, http).await;
    sf
}

/// Waits until the HTTP face of `sf` answers on `port`.
pub async fn http_ready(sf: &Smartfeeds, port: u16) {
    let started = Instant::now();
    while reqwest::get(format!("http://127.0.0.1:{port}/health")).await.map(|r| r.status()).ok() != Some(StatusCode::OK)
    {
        assert!(started.elapsed() < Duration::from_secs(15), "no HTTP face on {port}:\n{}", sf.log_tail(20));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `sf`'s log, past byte `offset` (a [`logs::offset`] taken before the start),
/// has a line with `text`, for at most `limit`.
pub async fn wait_logged(sf: &Smartfeeds, offset: u64, text: &str, limit: Duration) {
    let started = Instant::now();
    while !logs::read_from(&sf.log_path(), offset).contains(text) {
        assert!(started.elapsed() < limit, "no {text:?} in the log within {limit:?}:\n{}", sf.log_tail(20));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// PUTs the entry `id` (atom id `urn:ID`, title `ID`) into the feed `shared` as its
/// publisher, through the instance whose HTTP face is on `port`; what went wrong, if
/// anything (a refusal, or no answer from an instance that is down).
pub async fn put_shared(client: &reqwest::Client, port: u16, id: &str) -> Result<(), String> {
    let base = format!("http://127.0.0.1:{port}");
    let res = put_entry(client, &base, "shared", id, BOT, &small_entry(id)).await.map_err(|e| e.to_string())?;
    match res.status() {
        StatusCode::OK => Ok(()),
        status => Err(format!("{status} {}", res.text().await.unwrap_or_default())),
    }
}

/// One subscription's pushes in arrival order: item id, `PreviousCursor`, `LastCursor`.
pub type Received = Vec<(String, Option<String>, String)>;

/// Every push `conn` gets, by node, until each node has every id of `want` (then a second
/// more, for late repeats) or `quiet` passes without a push.
pub async fn collect(conn: &mut Client, nodes: &[&str], want: &HashSet<String>, quiet: Duration) -> Vec<Received> {
    let mut got: Vec<Received> = vec![Vec::new(); nodes.len()];
    loop {
        let complete = got.iter().all(|r| want.iter().all(|id| r.iter().any(|(i, _, _)| i == id)));
        let wait = if complete { Duration::from_secs(1) } else { quiet };
        let Some(m) = conn.next_message(wait).await else { return got };
        let p = parse_push(&m);
        let at = nodes.iter().position(|n| *n == p.node).unwrap_or_else(|| panic!("a push for {}", p.node));
        got[at].push((p.item_id().to_string(), p.previous.clone(), p.last_cursor().to_string()));
    }
}

/// The pid of the instance that last took the push shard of `feed` (of `shards`) on the
/// database `url`: the one pushing its changes, unless it has just died.
pub async fn pushing_pid(url: &str, feed: &str, shards: i32) -> Option<u32> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.ok()?;
    let task = tokio::spawn(conn);
    let row = client
        .query_opt(
            "SELECT s.owner FROM push_shards s JOIN feeds f ON s.shard = f.id % $2 WHERE f.name = $1",
            &[&feed, &i64::from(shards)],
        )
        .await
        .ok()
        .flatten();
    drop(client);
    let _ = task.await;
    let owner: Option<String> = row?.get(0);
    owner?.strip_prefix("pid ")?.parse().ok()
}
