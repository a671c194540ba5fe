//! `publish`: N Atom entries, K in flight, each a `<publish/>` with its own item id
//! (`PREFIX-i`), counted as a success only on an iq result. `http-publish` is the same run
//! over HTTP ([`measure`] with another way to send one entry).
//!
//! Ids carry a per-run prefix (time-based by default), so a second run adds new items
//! instead of updating the first run's; pass `--prefix` to measure updates instead.

use std::future::Future;
use std::time::{Duration, Instant};

use clap::Args;

use crate::report::Report;
use crate::stanzas::{outcome, publish};
use crate::{Ctx, RunOpts, pool};

/// The entries of a publish run, whatever the face.
#[derive(Args, Debug, Clone)]
pub struct EntryArgs {
    /// Entries to publish.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub items: u64,
    /// Item id prefix (default: a letter and the current Unix time in ms).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Bytes of `<content>` added to each entry.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub payload_bytes: u64,
}

#[derive(Args, Debug, Clone)]
pub struct PublishArgs {
    #[command(flatten)]
    pub entries: EntryArgs,
    /// Publish from this JID of our domain (default: the domain itself).
    #[arg(long)]
    pub from: Option<String>,
    /// Spread the entries over this many nodes, `NODE-0` … `NODE-{N-1}` in turn (one: all
    /// to `NODE`): many feeds written at once instead of one hot feed. The nodes must exist
    /// or be created by a publish (smartfeeds with `autocreate` and an admin publisher).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub nodes: u64,
}

/// A per-run prefix for item ids.
pub fn default_prefix(letter: &str) -> String {
    format!("{letter}{}", chrono::Utc::now().timestamp_millis())
}

/// Publishes `args.items` entries with `send(i, id, title, payload_bytes)`, `opts.in_flight`
/// at once until `deadline`; the figures go into `report`.
pub async fn measure<F, Fut>(
    opts: &RunOpts,
    deadline: Instant,
    args: &EntryArgs,
    letter: &str,
    mut report: Report,
    send: F,
) -> Report
where
    F: Fn(u64, String, String, usize) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let prefix = args.prefix.clone().unwrap_or_else(|| default_prefix(letter));
    let cpu = opts.cpu_window();
    let started = Instant::now();
    let mut tally = pool::run_indexed(args.items, opts.in_flight, deadline, |i| {
        let t0 = Instant::now();
        let sent = send(i, format!("{prefix}-{i}"), format!("Load item {i}"), args.payload_bytes as usize);
        async move { sent.await.map(|()| t0.elapsed()) }
    })
    .await;
    let elapsed = started.elapsed();
    let cpu = cpu.finish();
    report.standard(tally.lat_us.len() as u64, &mut tally, elapsed, &cpu);
    report.int("requested", args.items);
    report.int("payload_bytes", args.payload_bytes);
    report.str("prefix", &prefix);
    report
}

pub async fn run(ctx: &Ctx, args: &PublishArgs) -> Result<Report, String> {
    let (c, timeout): (_, Duration) = (&ctx.common, ctx.timeout());
    let send = |i: u64, id: String, title: String, padding: usize| async move {
        let node = match args.nodes {
            1 => c.node.clone(),
            n => format!("{}-{}", c.node, i % n),
        };
        let payload = publish(&node, &id, &title, padding);
        let reply = ctx.link.iq("set", args.from.as_deref(), &c.service, &payload, timeout).await;
        outcome(&reply.map_err(|e| e.to_string())?)
    };
    let mut report = measure(&c.run, ctx.deadline, &args.entries, "p", ctx.report("publish"), send).await;
    report.int("nodes", args.nodes);
    Ok(report)
}
