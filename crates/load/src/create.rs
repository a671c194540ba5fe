//! `create`: makes sure the node exists on a generic XEP-0060 service before a run.
//!
//! Prosody's and ejabberd's pubsub need a node created (XEP-0060 §8.1) before anything can
//! be published to it, and keep only `pubsub#max_items` items of it (Prosody: 20 by
//! default), too few for pages of 50. So the node is created with `--max-items` in its
//! configuration. A node that already exists (`conflict`) is fine. smartfeeds has no node
//! creation (its feeds come from its configuration, or an admin's first publish), so this
//! mode is only for the peers.

use std::time::Instant;

use clap::Args;

use crate::Ctx;
use crate::report::{Report, Tally};
use crate::stanzas::{create_node, outcome};

#[derive(Args, Debug, Clone)]
pub struct CreateArgs {
    /// `pubsub#max_items` of the new node: how many items the service keeps.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_items: u32,
}

pub async fn run(ctx: &Ctx, args: &CreateArgs) -> Result<Report, String> {
    let c = &ctx.common;
    let t0 = Instant::now();
    let reply = ctx.link.iq("set", None, &c.service, &create_node(&c.node, args.max_items), ctx.timeout()).await;
    let latency = t0.elapsed();
    let result = reply.map_err(|e| e.to_string()).and_then(|r| outcome(&r));
    let existed = matches!(&result, Err(e) if e.starts_with("conflict"));
    if let Err(e) = result.as_ref()
        && !existed
    {
        return Err(format!("cannot create {} on {}: {e}", c.node, c.service));
    }
    let mut tally = Tally::default();
    tally.ok(latency);
    let mut report = ctx.report("create");
    report.standard(1, &mut tally, latency, &[None, None, None]);
    report.int("max_items", args.max_items.into());
    report.str("outcome", if existed { "existed" } else { "created" });
    Ok(report)
}
