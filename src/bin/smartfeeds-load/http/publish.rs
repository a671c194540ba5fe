//! `http-publish`: N Atom entries, K in flight, each a `PUT BASE/feeds/FEED/items/ID` with
//! its own id (`PREFIX-i`), counted as a success only on a 2xx (sent after the commit).

use std::time::Instant;

use clap::Args;

use super::{HttpCtx, kind};
use crate::pool;
use crate::publish::default_prefix;
use crate::report::Report;
use crate::stanzas::atom_entry;

#[derive(Args, Debug, Clone)]
pub struct PublishArgs {
    /// Entries to publish.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub items: u64,
    /// Item id prefix (default: `h` and the current Unix time in ms).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Bytes of `<content>` added to each entry.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub payload_bytes: u64,
}

/// PUTs one entry; its latency or the kind of failure.
pub async fn put(ctx: &HttpCtx, id: &str, title: &str, payload_bytes: usize) -> Result<String, String> {
    let url = format!("{}/feeds/{}/items/{id}", ctx.common.base.trim_end_matches('/'), ctx.common.feed);
    let res = ctx
        .request(reqwest::Method::PUT, &url)
        .header(reqwest::header::CONTENT_TYPE, "application/atom+xml")
        .body(atom_entry(id, title, payload_bytes))
        .send()
        .await
        .map_err(kind)?;
    let status = res.status();
    let body = res.text().await.map_err(kind)?;
    if status.is_success() { Ok(body) } else { Err(format!("HTTP {}: {body}", status.as_u16())) }
}

pub async fn run(ctx: &HttpCtx, args: &PublishArgs) -> Result<Report, String> {
    let prefix = args.prefix.clone().unwrap_or_else(|| default_prefix("h"));
    let opts = &ctx.common.run;
    let cpu = opts.cpu_window();
    let started = Instant::now();
    let mut tally = pool::run_indexed(args.items, opts.in_flight, ctx.deadline, |i| {
        let (id, title) = (format!("{prefix}-{i}"), format!("Load item {i}"));
        async move {
            let t0 = Instant::now();
            put(ctx, &id, &title, args.payload_bytes as usize).await?;
            Ok(t0.elapsed())
        }
    })
    .await;
    let elapsed = started.elapsed();
    let cpu = cpu.finish();
    let mut report = ctx.report("publish");
    report.standard(tally.lat_us.len() as u64, &mut tally, elapsed, &cpu);
    report.int("requested", args.items);
    report.int("payload_bytes", args.payload_bytes);
    report.str("prefix", &prefix);
    Ok(report)
}
