//! `websub`: many WebSub subscriptions to one view, served by this tool's own callback
//! server on loopback, then publishes over HTTP, one at a time: how long from a publish's
//! answer to its last delivery, deliveries per second, the service's memory, and whether
//! every subscriber got every document once, in order, with an unbroken
//! `fo:prev_cursor` chain.

use super::HttpCtx;
use super::put_entries::put;
use crate::procstat;
use crate::report::{Report, Tally};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::IntoResponse;
use clap::Args;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Args, Debug, Clone)]
pub struct WebsubArgs {
    /// WebSub subscriptions (to the feed's view; `--token` must be allowed to publish).
    #[arg(long, default_value_t = 1000)]
    subscribers: usize,
    /// Items published, one at a time, each after the last one reached every subscriber.
    #[arg(long, default_value_t = 20)]
    publishes: usize,
    /// `hub.secret` of every subscription (signing is part of the work measured).
    #[arg(long, default_value = "load-secret")]
    secret: String,
}

/// What one subscriber's callback received, in arrival order.
#[derive(Default)]
struct Received {
    verified: bool,
    /// Per document: its item ids, `fo:prev_cursor`, `fo:last_cursor`.
    docs: Vec<(Vec<String>, Option<String>, Option<String>)>,
}

struct Sink {
    subs: Vec<Mutex<Received>>,
    /// Item id → (subscribers that got it, when the last of them did).
    got: Mutex<HashMap<String, (usize, Instant)>>,
    verified: AtomicUsize,
    posts: AtomicUsize,
}

fn tags(doc: &str, name: &str) -> Vec<String> {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    let mut out = Vec::new();
    let mut rest = doc;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(&close) else { break };
        out.push(after[..end].to_string());
        rest = &after[end + close.len()..];
    }
    out
}

async fn verify(
    State(sink): State<Arc<Sink>>,
    Path(i): Path<usize>,
    Query(q): Query<HashMap<String, String>>,
) -> impl IntoResponse {
    if let Some(r) = sink.subs.get(i) {
        let mut r = r.lock().unwrap_or_else(|p| p.into_inner());
        if !r.verified {
            r.verified = true;
            sink.verified.fetch_add(1, Ordering::SeqCst);
        }
    }
    q.get("hub.challenge").cloned().unwrap_or_default()
}

async fn deliver(State(sink): State<Arc<Sink>>, Path(i): Path<usize>, body: Bytes) -> impl IntoResponse {
    let now = Instant::now();
    let body = String::from_utf8_lossy(&body);
    let ids = tags(&body, "fo:id");
    let prev = tags(&body, "fo:prev_cursor").into_iter().next();
    let last = tags(&body, "fo:last_cursor").into_iter().next();
    sink.posts.fetch_add(1, Ordering::SeqCst);
    {
        let mut got = sink.got.lock().unwrap_or_else(|p| p.into_inner());
        for id in &ids {
            let e = got.entry(id.clone()).or_insert((0, now));
            e.0 += 1;
            e.1 = now;
        }
    }
    if let Some(r) = sink.subs.get(i) {
        r.lock().unwrap_or_else(|p| p.into_inner()).docs.push((ids, prev, last));
    }
    axum::http::StatusCode::NO_CONTENT
}

pub async fn run(ctx: &HttpCtx, args: &WebsubArgs) -> Result<Report, String> {
    let opts = &ctx.common.run;
    let base = ctx.common.base.trim_end_matches('/').to_string();
    let token = ctx.common.token.clone().ok_or("--token is needed: subscribing and publishing take one")?;
    let sink = Arc::new(Sink {
        subs: (0..args.subscribers).map(|_| Mutex::default()).collect(),
        got: Mutex::default(),
        verified: AtomicUsize::new(0),
        posts: AtomicUsize::new(0),
    });
    let app = axum::Router::new().route("/cb/{i}", axum::routing::get(verify).post(deliver)).with_state(sink.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| format!("callback port: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = ctx.client.clone();
    let topic = ctx.feed_url("");
    let rss_before = opts.service_pid.and_then(procstat::rss_mib);

    // Subscribe everybody, `in_flight` at a time, and wait for every verification.
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..opts.in_flight.max(1) {
        let (client, next, topic, base, token, secret) =
            (client.clone(), next.clone(), topic.clone(), base.clone(), token.clone(), args.secret.clone());
        let n = args.subscribers;
        workers.push(tokio::spawn(async move {
            let mut refused = 0usize;
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    return refused;
                }
                let callback = format!("http://127.0.0.1:{port}/cb/{i}");
                let form = [
                    ("hub.mode", "subscribe"),
                    ("hub.topic", topic.as_str()),
                    ("hub.callback", callback.as_str()),
                    ("hub.secret", secret.as_str()),
                ];
                let res = client.post(format!("{base}/hub")).bearer_auth(&token).form(&form).send().await;
                if !res.is_ok_and(|r| r.status() == 202) {
                    refused += 1;
                }
            }
        }));
    }
    let mut refused = 0;
    for w in workers {
        refused += w.await.unwrap_or(0);
    }
    if refused > 0 {
        return Err(format!("{refused} subscription requests were not accepted"));
    }
    let deadline = Instant::now() + Duration::from_secs_f64(opts.timeout);
    while sink.verified.load(Ordering::SeqCst) < args.subscribers {
        if Instant::now() > deadline {
            return Err(format!("only {} of {} verified", sink.verified.load(Ordering::SeqCst), args.subscribers));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let subscribe_s = started.elapsed().as_secs_f64();
    // The hub stores a subscription right after its verification answer.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Publish one at a time; each waits until every subscriber has it.
    let cpu = opts.cpu_window();
    let run_id = format!("{:x}", rand::random::<u32>());
    let ids: Vec<String> = (0..args.publishes).map(|j| format!("w{run_id}-{j}")).collect();
    let mut tally = Tally::default();
    let publishing = Instant::now();
    let mut rss_peak = rss_before;
    for id in &ids {
        put(ctx, id, id, 0).await.map_err(|e| format!("PUT {id}: {e}"))?;
        let acked = Instant::now();
        let deadline = acked + Duration::from_secs_f64(opts.timeout);
        loop {
            let done = sink.got.lock().unwrap_or_else(|p| p.into_inner()).get(id).copied();
            match done {
                Some((n, last)) if n >= args.subscribers => {
                    tally.ok(last.saturating_duration_since(acked));
                    break;
                }
                _ if Instant::now() > deadline => {
                    tally.error("not everybody within the timeout");
                    break;
                }
                _ => tokio::time::sleep(Duration::from_millis(2)).await,
            }
        }
        if let Some(rss) = opts.service_pid.and_then(procstat::rss_mib) {
            rss_peak = Some(rss_peak.map_or(rss, |p: f64| p.max(rss)));
        }
    }
    let elapsed = publishing.elapsed();
    let used = cpu.finish();

    // Every subscriber: every item once, in order, the cursors chained.
    let (mut wrong_items, mut broken_chains) = (0usize, 0usize);
    for r in &sink.subs {
        let r = r.lock().unwrap_or_else(|p| p.into_inner());
        let got: Vec<&String> = r.docs.iter().flat_map(|d| d.0.iter()).collect();
        if got.len() != ids.len() || got.iter().zip(&ids).any(|(a, b)| *a != b) {
            wrong_items += 1;
        }
        if r.docs.windows(2).any(|w| w[1].1 != w[0].2) {
            broken_chains += 1;
        }
    }
    let posts = sink.posts.load(Ordering::SeqCst);
    let mut report = ctx.report("websub");
    report.str("topic", &topic);
    report.int("subscribers", args.subscribers as u64);
    report.num("subscribe_s", Some(subscribe_s));
    report.standard(args.publishes as u64, &mut tally, elapsed, &used);
    report.int("deliveries", posts as u64);
    report.num("deliveries_per_s", Some(posts as f64 / elapsed.as_secs_f64()));
    report.int("subscribers_missing_or_out_of_order", wrong_items as u64);
    report.int("broken_prev_cursor_chains", broken_chains as u64);
    report.num("service_rss_before_mib", rss_before);
    report.num("service_rss_peak_mib", rss_peak);
    Ok(report)
}
