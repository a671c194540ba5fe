//! `http-longpoll`: N long-polls held at once on one view, then one publish.
//!
//! A marker item is published first; every poll asks for the items after it
//! (`since=id:MARKER`), so each is held. The polls start in waves of `--in-flight`, and the
//! next wave starts once the service's own gauge (`smartfeeds_http_held{kind="longpoll"}`
//! at `--metrics`) shows the previous ones held. With all N held the service's resident
//! memory is read, one item is published, and the time from sending that publish to each
//! answer's headers is taken. A poll that is not answered with exactly that item is an
//! error: none may be lost.

use std::time::{Duration, Instant};

use clap::Args;
use serde::Deserialize;

use super::put_entries::put;
use super::{HttpCtx, kind};
use crate::procstat;
use crate::publish::default_prefix;
use crate::report::{Report, Tally};

#[derive(Args, Debug, Clone)]
pub struct LongpollArgs {
    /// Long-polls to hold at once.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=200_000))]
    pub polls: u32,
    /// The `timeout` each poll asks for, seconds.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub hold: u64,
    /// smartfeeds' Prometheus endpoint (`[metrics] listen`), to see the polls held.
    #[arg(long)]
    pub metrics: String,
}

#[derive(Deserialize)]
struct Answer {
    items: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    id: String,
}

/// The held long-polls the service reports.
async fn held(ctx: &HttpCtx, metrics: &str) -> Result<u64, String> {
    let text = ctx.client.get(metrics).send().await.map_err(kind)?.text().await.map_err(kind)?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix("smartfeeds_http_held{kind=\"longpoll\"} "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64))
}

/// Waits until the service holds at least `n` long-polls (10 s at most).
async fn until_held(ctx: &HttpCtx, metrics: &str, n: u64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = held(ctx, metrics).await?;
        if now >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("only {now} of {n} long-polls held after 10 s"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One poll: when its answer's headers came, and the ids it carried.
async fn poll(ctx: &HttpCtx, url: &str) -> Result<(Instant, Vec<String>), String> {
    let res = ctx.request(reqwest::Method::GET, url).send().await.map_err(kind)?;
    let at = Instant::now();
    if !res.status().is_success() {
        return Err(format!("HTTP {}", res.status().as_u16()));
    }
    let bytes = res.bytes().await.map_err(kind)?;
    let answer: Answer = serde_json::from_slice(&bytes).map_err(|e| format!("bad JSON: {e}"))?;
    Ok((at, answer.items.into_iter().map(|i| i.id).collect()))
}

pub async fn run(ctx: &HttpCtx, args: &LongpollArgs) -> Result<Report, String> {
    let prefix = default_prefix("w");
    let (marker, wake) = (format!("{prefix}-marker"), format!("{prefix}-wake"));
    put(ctx, &marker, "Long-poll marker", 0).await.map_err(|e| format!("publishing the marker: {e}"))?;
    let url = ctx.feed_url(&format!("since=id:{marker}&timeout={}&max=10", args.hold));
    let pid = ctx.common.run.service_pid;
    let rss_before = pid.and_then(procstat::rss_mib);
    let base = held(ctx, &args.metrics).await?;

    let started = Instant::now();
    let mut polls = Vec::with_capacity(args.polls as usize);
    let wave = ctx.common.run.in_flight.max(1);
    while polls.len() < args.polls as usize {
        let n = (args.polls as usize - polls.len()).min(wave as usize);
        for _ in 0..n {
            let (ctx, url) = (ctx.clone(), url.clone());
            polls.push(tokio::spawn(async move { poll(&ctx, &url).await }));
        }
        until_held(ctx, &args.metrics, base + polls.len() as u64).await?;
    }
    let connect_s = started.elapsed().as_secs_f64();
    // Let the service settle before reading its memory.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_held = pid.and_then(procstat::rss_mib);

    let cpu = ctx.common.run.cpu_window();
    let t0 = Instant::now();
    put(ctx, &wake, "Long-poll wake-up", 0).await.map_err(|e| format!("publishing the wake-up: {e}"))?;
    let ack = t0.elapsed();
    let mut tally = Tally::default();
    let mut last = Duration::ZERO;
    for p in polls {
        match p.await.map_err(|e| e.to_string()).and_then(|r| r) {
            Ok((at, ids)) if ids == [wake.clone()] => {
                let took = at.saturating_duration_since(t0);
                last = last.max(took);
                tally.ok(took);
            }
            Ok((_, ids)) => tally.error(format!("answered with {} items, not the wake-up", ids.len())),
            Err(e) => tally.error(e),
        }
    }
    let elapsed = t0.elapsed();
    let cpu = cpu.finish();
    let mut report = ctx.report("longpoll");
    report.standard(tally.lat_us.len() as u64, &mut tally, elapsed, &cpu);
    report.int("polls", args.polls.into());
    report.num("connect_s", Some(connect_s));
    report.num("publish_ack_ms", Some(ack.as_secs_f64() * 1e3));
    report.num("wake_last_ms", Some(last.as_secs_f64() * 1e3));
    report.num("service_rss_mib_before", rss_before);
    report.num("service_rss_mib_held", rss_held);
    let per_poll = rss_before.zip(rss_held).map(|(b, h)| (h - b) * 1024.0 / f64::from(args.polls));
    report.num("service_kib_per_held_poll", per_poll);
    Ok(report)
}
