//! `pull`: K walkers page through a node at once.
//!
//! With RSM (the default) the tool first walks the node once, alone and unmeasured, to
//! learn its ring of pages: how many, how many items each holds, and the `after` cursor
//! that starts each. Then K walkers start spread over that ring and page on with the
//! `<last>` each reply returns, wrapping to the first page (no `after`) past the last, until
//! `--pages` pages are pulled. A page counts as an error when the reply is an error, has no
//! RSM `<set/>`, holds a different number of items than the first walk saw, or returns a
//! `<last>` that differs from the first walk's (the node must not change during the run).
//!
//! The walk is the same over HTTP (`http-pull`): a [`Pager`] fetches one page, whatever the
//! face.
//!
//! With `--max-items` every request is `max_items="MAX"` (XEP-0060 §6.5.7), for services
//! without RSM such as Prosody 0.12's mod_pubsub; each reply must hold as many items as the
//! first one did.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;

use crate::report::{Report, Tally};
use crate::stanzas::{PageAsk, PageFacts, items_query, outcome, page_facts};
use crate::{Ctx, RunOpts};

#[derive(Args, Debug, Clone)]
pub struct PullArgs {
    /// Pages to pull (the first, unmeasured walk not included).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub pages: u64,
    /// Items per page.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max: u32,
    /// Page with RSM `<max>` and `<after>` (the default).
    #[arg(long, conflicts_with = "max_items")]
    pub rsm: bool,
    /// Ask for `max_items="MAX"` instead of RSM.
    #[arg(long)]
    pub max_items: bool,
    /// Page with MAM queries (XEP-0313 with `node`) instead of items requests, RSM as
    /// usual; the results, messages before each iq result, are drained unread.
    #[arg(long, conflicts_with_all = ["max_items", "rsm"])]
    pub mam: bool,
}

impl PullArgs {
    /// The request for the page after `after`.
    fn ask<'a>(&self, after: Option<&'a str>) -> PageAsk<'a> {
        if self.max_items {
            PageAsk::MaxItems(self.max)
        } else if self.mam {
            PageAsk::Mam { max: self.max, after }
        } else {
            PageAsk::Rsm { max: self.max, after }
        }
    }
}

/// The node as the first walk saw it.
struct Ring {
    /// The `after` of each page (`None` for the first).
    afters: Vec<Option<String>>,
    /// Items each page holds.
    sizes: Vec<usize>,
    /// The RSM `<count>`, when the service gives one.
    count: Option<u64>,
}

/// Fetches one page of the node, over whichever face.
pub trait Pager {
    /// One request, timed: the reply's facts or the kind of failure.
    fn fetch(&self, ask: &PageAsk<'_>) -> impl Future<Output = (Duration, Result<PageFacts, String>)>;
    /// The node or view, for messages.
    fn node(&self) -> &str;
    /// Whether new work may still start.
    fn open(&self) -> bool;
}

impl Pager for Ctx {
    async fn fetch(&self, ask: &PageAsk<'_>) -> (Duration, Result<PageFacts, String>) {
        let query = items_query(&self.common.node, ask);
        let t0 = Instant::now();
        let reply = self.link.iq(ask.iq_type(), None, &self.common.service, &query, self.timeout()).await;
        let latency = t0.elapsed();
        let facts = reply
            .map_err(|e| e.to_string())
            .and_then(|r| outcome(&r).map(|()| r))
            .and_then(|r| page_facts(&r, ask).ok_or_else(|| "result without <pubsub><items/> or <fin/>".to_string()));
        (latency, facts)
    }

    fn node(&self) -> &str {
        &self.common.node
    }

    fn open(&self) -> bool {
        Ctx::open(self)
    }
}

/// The first, sequential walk (at most `cap` pages).
async fn discover(ctx: &impl Pager, args: &PullArgs, cap: u64) -> Result<Ring, String> {
    let node = ctx.node();
    if args.max_items {
        let facts =
            ctx.fetch(&PageAsk::MaxItems(args.max)).await.1.map_err(|e| format!("first pull of {node}: {e}"))?;
        if facts.items == 0 {
            return Err(format!("{node} has no items; publish some first"));
        }
        if facts.items < args.max as usize {
            eprintln!("smartfeeds-load: {node} returned {} items for max_items={}", facts.items, args.max);
        }
        return Ok(Ring { afters: vec![None], sizes: vec![facts.items], count: None });
    }
    let mut ring = Ring { afters: vec![None], sizes: Vec::new(), count: None };
    loop {
        let after = ring.afters.last().cloned().flatten();
        let ask = args.ask(after.as_deref());
        let facts = ctx.fetch(&ask).await.1.map_err(|e| format!("first walk of {node}: {e}"))?;
        if !facts.has_set {
            return Err(format!("{node}: the service ignored RSM (no <set/> in the reply); try --max-items"));
        }
        ring.count = ring.count.or(facts.count);
        if facts.items == 0 {
            ring.afters.pop();
            break;
        }
        ring.sizes.push(facts.items);
        let full = facts.items >= args.max as usize;
        if !full || ring.sizes.len() as u64 >= cap {
            break;
        }
        let Some(last) = facts.last else { return Err(format!("{node}: a full page without RSM <last>")) };
        // A page seen before (a service answering one page to every request, `canned`)
        // closes the ring.
        if ring.afters.contains(&Some(last.clone())) {
            break;
        }
        ring.afters.push(Some(last));
    }
    if ring.sizes.is_empty() {
        return Err(format!("{node} has no items; publish some first"));
    }
    Ok(ring)
}

/// One walker: pages from `start` on, while tickets last.
async fn walk(ctx: &impl Pager, args: &PullArgs, ring: &Ring, start: usize, tickets: &AtomicU64, total: u64) -> Tally {
    let mut tally = Tally::default();
    let mut pos = start;
    let mut after = ring.afters[pos].clone();
    while ctx.open() && tickets.fetch_add(1, Ordering::Relaxed) < total {
        let ask = args.ask(after.as_deref());
        let (latency, facts) = ctx.fetch(&ask).await;
        let next = (pos + 1) % ring.sizes.len();
        // Past an error, carry on from where the first walk says the next page starts.
        let mut next_after = ring.afters[next].clone();
        match facts {
            Err(kind) => tally.error(kind),
            Ok(f) if !args.max_items && !f.has_set => tally.error("result without RSM <set/>"),
            Ok(f) if f.items != ring.sizes[pos] => {
                tally.error(format!("page of {} items where the first walk saw {}", f.items, ring.sizes[pos]))
            }
            Ok(f) if ring.count.is_some() && f.count != ring.count => tally.error("RSM <count> changed"),
            Ok(_) if args.max_items || next == 0 => tally.ok(latency),
            Ok(f) if f.last.is_none() => tally.error("full page without RSM <last>"),
            Ok(f) => {
                if f.last == ring.afters[next] {
                    tally.ok(latency);
                } else {
                    tally.error("RSM <last> differs from the first walk's");
                }
                next_after = f.last;
            }
        }
        pos = next;
        after = next_after;
    }
    tally
}

pub async fn run(ctx: &Ctx, args: &PullArgs) -> Result<Report, String> {
    let report = ctx.report(match (args.max_items, args.mam) {
        (true, _) => "pull-max-items",
        (_, true) => "pull-mam",
        _ => "pull",
    });
    measure(ctx, args, &ctx.common.run, report).await
}

/// Learns the ring, then walks it with `opts.in_flight` walkers; the figures go into `report`.
pub async fn measure(ctx: &impl Pager, args: &PullArgs, opts: &RunOpts, mut report: Report) -> Result<Report, String> {
    let ring = discover(ctx, args, args.pages).await?;
    let walkers = opts.in_flight as usize;
    let tickets = AtomicU64::new(0);
    let cpu = opts.cpu_window();
    let started = Instant::now();
    let pages = ring.sizes.len();
    let tallies = futures::future::join_all(
        (0..walkers).map(|w| walk(ctx, args, &ring, w * pages / walkers, &tickets, args.pages)),
    )
    .await;
    let elapsed = started.elapsed();
    let cpu = cpu.finish();
    let mut tally = Tally::default();
    for t in tallies {
        tally.merge(t);
    }
    let items: u64 = ring.sizes.iter().map(|&s| s as u64).sum();
    report.standard(tally.lat_us.len() as u64, &mut tally, elapsed, &cpu);
    report.int("max", args.max.into());
    report.int("ring_pages", pages as u64);
    report.int("ring_items", items);
    match ring.count {
        Some(n) => report.int("count", n),
        None => report.num("count", None),
    }
    Ok(report)
}
