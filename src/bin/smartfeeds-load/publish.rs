//! `publish`: N Atom entries, K in flight, each a `<publish/>` with its own item id
//! (`PREFIX-i`), counted as a success only on an iq result.
//!
//! Ids carry a per-run prefix (time-based by default), so a second run adds new items
//! instead of updating the first run's; pass `--prefix` to measure updates instead.

use std::time::Instant;

use clap::Args;

use crate::report::Report;
use crate::stanzas::{outcome, publish};
use crate::{Ctx, pool};

#[derive(Args, Debug, Clone)]
pub struct PublishArgs {
    /// Entries to publish.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub items: u64,
    /// Item id prefix (default: `p` and the current Unix time in ms).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Bytes of `<content>` added to each entry.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub payload_bytes: u64,
    /// Publish from this JID of our domain (default: the domain itself).
    #[arg(long)]
    pub from: Option<String>,
}

/// A per-run prefix for item ids.
pub fn default_prefix(letter: &str) -> String {
    format!("{letter}{}", chrono::Utc::now().timestamp_millis())
}

pub async fn run(ctx: &Ctx, args: &PublishArgs) -> Result<Report, String> {
    let prefix = args.prefix.clone().unwrap_or_else(|| default_prefix("p"));
    let (c, timeout) = (&ctx.common, ctx.timeout());
    let cpu = ctx.cpu_window();
    let started = Instant::now();
    let mut tally = pool::run_indexed(args.items, c.in_flight, ctx.deadline, |i| {
        let payload =
            publish(&c.node, &format!("{prefix}-{i}"), &format!("Load item {i}"), args.payload_bytes as usize);
        async move {
            let t0 = Instant::now();
            let reply = ctx.link.iq("set", args.from.as_deref(), &c.service, &payload, timeout).await;
            let latency = t0.elapsed();
            outcome(&reply.map_err(|e| e.to_string())?)?;
            Ok(latency)
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
