//! `http-fanout`: N subscribers held on one view (event streams or long-polls), then P
//! publishes one after another: how long until the last subscriber has each, and what each
//! event costs the service in CPU and each held subscriber in memory. The same run against
//! Nchan (the nginx pub/sub module, `--target nchan`) gives the peer's figures: its
//! subscribers are `GET BASE/sub/CHANNEL` (Nchan's own event-stream and long-poll
//! subscribers) and its publishes `POST BASE/pub/CHANNEL`.
//!
//! Subscribers connect from `--sources` loopback addresses (127.0.0.1, 127.0.0.2, …), so
//! ten thousand and more connections do not run out of ports. A long-poll subscriber asks
//! again as soon as it has an answer: after its last cursor (smartfeeds), or with the
//! `If-Modified-Since` / `If-None-Match` of the last answer (Nchan). Each publish waits
//! until every subscriber has the previous one and `--settle-ms` more (time for long-polls
//! to be held again); a subscriber missing an event is an error.
//!
//! The tool counts its own CPU too (it must stay well under a core for the figures to be
//! the service's, not the tool's).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use futures::StreamExt;
use serde::Deserialize;

use super::put_entries::put;
use super::{HttpCtx, kind};
use crate::procstat;
use crate::publish::default_prefix;
use crate::report::{Report, Tally};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// Server-Sent Events: one stream per subscriber.
    Sse,
    /// Long-polls, asked again after each answer.
    Longpoll,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Target {
    Smartfeeds,
    Nchan,
}

#[derive(Args, Debug, Clone)]
pub struct FanoutArgs {
    #[arg(long, value_enum, default_value_t = Kind::Sse)]
    pub kind: Kind,
    #[arg(long, value_enum, default_value_t = Target::Smartfeeds)]
    pub target: Target,
    /// Subscribers held at once.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub subscribers: u32,
    /// Subscribers ask without the token, as anonymous readers of an open feed (each request
    /// then passes the rate limit of its address, as a web page's would); publishes still
    /// carry it.
    #[arg(long)]
    pub anonymous: bool,
    /// Publishes, one after another.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub publishes: u32,
    /// Loopback source addresses to connect from (127.0.0.1 …).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u8).range(1..=250))]
    pub sources: u8,
    /// Milliseconds between one publish reaching everyone and the next.
    #[arg(long, default_value_t = 300)]
    pub settle_ms: u64,
    /// Bytes of text in each published item (smartfeeds) or message (Nchan).
    #[arg(long, default_value_t = 512)]
    pub payload: usize,
}

/// What every subscriber shares: arrivals per publish.
struct Board {
    t0: Instant,
    /// Subscribers whose stream (or first long-poll) was sent and answered with headers, or
    /// is held.
    connected: AtomicUsize,
    /// Per publish: when it was sent, ns after `t0`.
    sent: Vec<AtomicU64>,
    /// Per publish: how many subscribers have it.
    arrived: Vec<AtomicUsize>,
    /// Per publish: the last arrival, ns after `t0`.
    last: Vec<AtomicU64>,
    /// Every arrival's latency, µs.
    latencies: std::sync::Mutex<Vec<u64>>,
}

impl Board {
    fn arrive(&self, publish: usize) {
        let Some(sent) = self.sent.get(publish) else { return };
        let now = self.t0.elapsed().as_nanos() as u64;
        self.arrived[publish].fetch_add(1, Ordering::SeqCst);
        self.last[publish].fetch_max(now, Ordering::SeqCst);
        let lat = now.saturating_sub(sent.load(Ordering::SeqCst)) / 1000;
        self.latencies.lock().unwrap_or_else(|p| p.into_inner()).push(lat);
    }
}

/// One HTTP client per source address.
fn clients(ctx: &HttpCtx, sources: u8) -> Result<Vec<reqwest::Client>, String> {
    (1..=sources)
        .map(|i| {
            reqwest::Client::builder()
                .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, i)))
                // A stream is one request for the whole run.
                .timeout(Duration::from_secs_f64(ctx.common.run.duration.max(ctx.common.run.timeout)))
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| format!("cannot build the HTTP client: {e}"))
        })
        .collect()
}

/// Counts the `data:` lines of an event stream as arrivals, until it ends.
async fn sse(
    client: reqwest::Client,
    ctx: HttpCtx,
    anonymous: bool,
    url: String,
    board: Arc<Board>,
) -> Result<(), String> {
    let mut req = client.get(&url).header(reqwest::header::ACCEPT, "text/event-stream");
    if let Some(t) = ctx.common.token.as_ref().filter(|_| !anonymous) {
        req = req.bearer_auth(t);
    }
    let res = req.send().await.map_err(kind)?;
    if !res.status().is_success() {
        return Err(format!("HTTP {}", res.status().as_u16()));
    }
    board.connected.fetch_add(1, Ordering::SeqCst);
    let (mut body, mut line, mut seen) = (res.bytes_stream(), Vec::new(), 0usize);
    while let Some(chunk) = body.next().await {
        for &b in chunk.map_err(kind)?.iter() {
            if b == b'\n' {
                if line.starts_with(b"data:") {
                    board.arrive(seen);
                    seen += 1;
                }
                line.clear();
            } else if line.len() < 8 {
                line.push(b);
            }
        }
        if seen >= board.sent.len() {
            break;
        }
    }
    Ok(())
}

#[derive(Deserialize)]
struct Answer {
    count: usize,
    last_cursor: Option<String>,
}

/// Long-polls one after another, each answer's items (smartfeeds) or message (Nchan)
/// counted as arrivals, until every publish arrived.
async fn longpoll(
    client: reqwest::Client,
    ctx: HttpCtx,
    anonymous: bool,
    target: Target,
    first: String,
    board: Arc<Board>,
) -> Result<(), String> {
    let (mut seen, mut url, mut validators) = (0usize, first, None::<(String, String)>);
    let mut counted = false;
    while seen < board.sent.len() {
        let mut req = client.get(&url);
        if let Some(t) = ctx.common.token.as_ref().filter(|_| !anonymous) {
            req = req.bearer_auth(t);
        }
        if let Some((modified, etag)) = &validators {
            req = req.header("if-modified-since", modified).header("if-none-match", etag);
        }
        let send = req.send();
        if !counted {
            // Held from here (the service's own gauge says when; this is the tool's view).
            board.connected.fetch_add(1, Ordering::SeqCst);
            counted = true;
        }
        let res = send.await.map_err(kind)?;
        if !res.status().is_success() {
            return Err(format!("HTTP {}", res.status().as_u16()));
        }
        match target {
            Target::Smartfeeds => {
                let answer: Answer = res.json().await.map_err(|e| format!("bad JSON: {e}"))?;
                for _ in 0..answer.count {
                    board.arrive(seen);
                    seen += 1;
                }
                if let Some(c) = answer.last_cursor {
                    url = ctx.feed_url(&format!("since=cursor:{c}&timeout=120&max=10"));
                }
            }
            Target::Nchan => {
                let header = |n: &str| res.headers().get(n).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
                validators = Some((header("last-modified"), header("etag")));
                res.bytes().await.map_err(kind)?;
                board.arrive(seen);
                seen += 1;
            }
        }
    }
    Ok(())
}

/// Publishes message `i`.
async fn publish(ctx: &HttpCtx, args: &FanoutArgs, prefix: &str, i: usize) -> Result<(), String> {
    match args.target {
        Target::Smartfeeds => put(ctx, &format!("{prefix}-{i}"), "fan-out", args.payload).await.map(drop),
        Target::Nchan => {
            let url = format!("{}/pub/{}", ctx.common.base.trim_end_matches('/'), ctx.common.feed);
            let body = format!("{{\"id\":\"{prefix}-{i}\",\"text\":\"{}\"}}", "x".repeat(args.payload));
            let res = ctx.client.post(url).body(body).send().await.map_err(kind)?;
            if res.status().is_success() { Ok(()) } else { Err(format!("HTTP {}", res.status().as_u16())) }
        }
    }
}

pub async fn run(ctx: &HttpCtx, args: &FanoutArgs) -> Result<Report, String> {
    let prefix = default_prefix("f");
    let n = args.subscribers as usize;
    let p = args.publishes as usize;
    let board = Arc::new(Board {
        t0: Instant::now(),
        connected: AtomicUsize::new(0),
        sent: (0..p).map(|_| AtomicU64::new(u64::MAX)).collect(),
        arrived: (0..p).map(|_| AtomicUsize::new(0)).collect(),
        last: (0..p).map(|_| AtomicU64::new(0)).collect(),
        latencies: std::sync::Mutex::new(Vec::with_capacity(n * p)),
    });
    // Where a smartfeeds long-poll starts: after a marker published now (which also makes
    // the feed, for streams on a new one).
    let marker = format!("{prefix}-marker");
    if args.target == Target::Smartfeeds {
        put(ctx, &marker, "marker", 0).await.map_err(|e| format!("publishing the marker: {e}"))?;
    }
    let url = match (args.target, args.kind) {
        (Target::Nchan, _) => format!("{}/sub/{}", ctx.common.base.trim_end_matches('/'), ctx.common.feed),
        (Target::Smartfeeds, Kind::Sse) => ctx.feed_url(""),
        (Target::Smartfeeds, Kind::Longpoll) => ctx.feed_url(&format!("since=id:{marker}&timeout=120&max=10")),
    };
    let pid = ctx.common.run.service_pid;
    let rss_before = pid.and_then(procstat::rss_mib);
    let clients = clients(ctx, args.sources)?;
    let started = Instant::now();
    let mut subs = Vec::with_capacity(n);
    let wave = ctx.common.run.in_flight.max(1) as usize;
    let (sub_kind, target, anonymous) = (args.kind, args.target, args.anonymous);
    for i in 0..n {
        let (client, ctx, url, shared) = (clients[i % clients.len()].clone(), ctx.clone(), url.clone(), board.clone());
        subs.push(tokio::spawn(async move {
            match sub_kind {
                Kind::Sse => sse(client, ctx, anonymous, url, shared).await,
                Kind::Longpoll => longpoll(client, ctx, anonymous, target, url, shared).await,
            }
        }));
        if (i + 1) % wave == 0 {
            wait_for(|| board.connected.load(Ordering::SeqCst) > i, Duration::from_secs(30)).await;
        }
    }
    let all = wait_for(|| board.connected.load(Ordering::SeqCst) >= n, Duration::from_secs(60)).await;
    if !all {
        return Err(format!("only {} of {n} subscribers connected", board.connected.load(Ordering::SeqCst)));
    }
    let connect_s = started.elapsed().as_secs_f64();
    // Time for the last requests to be held, then the service's memory.
    tokio::time::sleep(Duration::from_millis(1000 + args.settle_ms)).await;
    let rss_held = pid.and_then(procstat::rss_mib);

    let cpu = ctx.common.run.cpu_window();
    let t_first = Instant::now();
    let mut tally = Tally::default();
    let mut to_last = Vec::with_capacity(p);
    for i in 0..p {
        board.sent[i].store(board.t0.elapsed().as_nanos() as u64, Ordering::SeqCst);
        if let Err(e) = publish(ctx, args, &prefix, i).await {
            tally.error(format!("publish: {e}"));
            continue;
        }
        let done = wait_for(|| board.arrived[i].load(Ordering::SeqCst) >= n, Duration::from_secs(60)).await;
        if !done {
            tally.error(format!("publish {i} reached {} of {n}", board.arrived[i].load(Ordering::SeqCst)));
        }
        let took = board.last[i].load(Ordering::SeqCst).saturating_sub(board.sent[i].load(Ordering::SeqCst));
        to_last.push(Duration::from_nanos(took));
        tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
    }
    // CPU counted up to the last arrival, not through the settling pauses' idle time.
    let cpu = cpu.finish();
    let elapsed = t_first.elapsed();
    for s in subs {
        match s.await.map_err(|e| e.to_string()).and_then(|r| r) {
            Ok(()) => {}
            Err(e) => tally.error(e),
        }
    }
    let events = (n * p) as u64;
    tally.lat_us = std::mem::take(&mut *board.latencies.lock().unwrap_or_else(|p| p.into_inner()));
    let mut report = ctx.report(match args.kind {
        Kind::Sse => "fanout-sse",
        Kind::Longpoll => "fanout-longpoll",
    });
    report.str("target", &format!("{:?}", args.target).to_lowercase());
    report.standard(events, &mut tally, elapsed, &cpu);
    report.int("subscribers", n as u64);
    report.int("publishes", p as u64);
    report.num("connect_s", Some(connect_s));
    to_last.sort();
    report.num("to_last_p50_ms", to_last.get(to_last.len() / 2).map(|d| d.as_secs_f64() * 1e3));
    report.num("to_last_max_ms", to_last.last().map(|d| d.as_secs_f64() * 1e3));
    let per_event_us = |s: Option<f64>| s.map(|s| s * 1e6 / events as f64);
    report.num("service_cpu_us_per_event", per_event_us(cpu[0]));
    report.num("tool_cpu_us_per_event", per_event_us(cpu[2]));
    report.num("service_rss_mib_before", rss_before);
    report.num("service_rss_mib_held", rss_held);
    let per_held = rss_before.zip(rss_held).map(|(b, h)| (h - b) * 1024.0 / n as f64);
    report.num("service_kib_per_held", per_held);
    Ok(report)
}

/// Waits until `done` holds or `limit` passes; whether it held.
async fn wait_for(done: impl Fn() -> bool, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    true
}
