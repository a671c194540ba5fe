//! `http-archive`: what an archive document costs at each depth of a feed.
//!
//! The recent document (`archive/`) names its own number in its `via` link: N. The recent
//! document, `archive/N-1` (the newest full one), `archive/N/2` and `archive/1` (the oldest)
//! are then fetched in turn, `--rounds` times each, with `--in-flight` requests at once;
//! each answer must be a 200 Atom document. Reported per document: the median and p99
//! latency, and the ratio of the oldest document's median to the recent one's (keyset reads
//! make it about 1; an OFFSET scan would make it grow with the feed).

use std::time::{Duration, Instant};

use clap::Args;

use super::{HttpCtx, kind};
use crate::pool;
use crate::report::{Report, Tally, percentiles};

#[derive(Args, Debug, Clone)]
pub struct ArchiveArgs {
    /// Fetches of each document.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub rounds: u64,
}

/// One fetch of `url`: its latency, or the kind of failure.
async fn fetch(ctx: &HttpCtx, url: &str) -> Result<(Duration, String), String> {
    let t0 = Instant::now();
    let res = ctx.request(reqwest::Method::GET, url).header(reqwest::header::ACCEPT, "application/atom+xml").send();
    let res = res.await.map_err(kind)?;
    if !res.status().is_success() {
        return Err(format!("HTTP {}", res.status().as_u16()));
    }
    let body = res.text().await.map_err(kind)?;
    if !body.contains("<feed") {
        return Err("not an Atom feed document".into());
    }
    Ok((t0.elapsed(), body))
}

/// The number in the recent document's `via` link.
fn via_number(doc: &str) -> Option<u64> {
    let at = doc.find(r#"rel="via""#)?;
    let rest = &doc[at..];
    let href = &rest[rest.find("href=\"")? + 6..];
    let href = &href[..href.find('"')?];
    href.rsplit('/').next()?.parse().ok()
}

pub async fn run(ctx: &HttpCtx, args: &ArchiveArgs) -> Result<Report, String> {
    let base = format!("{}/feeds/{}/archive/", ctx.common.base.trim_end_matches('/'), ctx.common.feed);
    let (_, recent) = fetch(ctx, &base).await.map_err(|e| format!("the recent document: {e}"))?;
    let n = via_number(&recent).ok_or("the recent document has no via link")?;
    let docs: Vec<(String, String)> =
        [("recent", base.clone()), ("newest_full", format!("{base}{}", n.saturating_sub(1).max(1)))]
            .into_iter()
            .chain([("middle", format!("{base}{}", (n / 2).max(1))), ("oldest", format!("{base}1"))])
            .map(|(k, u)| (k.to_string(), u))
            .collect();
    let opts = &ctx.common.run;
    let cpu = opts.cpu_window();
    let started = Instant::now();
    let mut all = Tally::default();
    let mut report = ctx.report("archive");
    let mut medians = Vec::new();
    for (name, url) in &docs {
        let tally = pool::run_indexed(args.rounds, opts.in_flight, ctx.deadline, |_| async {
            fetch(ctx, url).await.map(|(took, _)| took)
        })
        .await;
        let p = percentiles(&mut tally.lat_us.clone());
        report.num(&format!("{name}_p50_ms"), p.map(|p| p.p50));
        report.num(&format!("{name}_p99_ms"), p.map(|p| p.p99));
        medians.push(p.map(|p| p.p50));
        all.merge(tally);
    }
    let elapsed = started.elapsed();
    let cpu = cpu.finish();
    report.standard(all.lat_us.len() as u64, &mut all, elapsed, &cpu);
    report.int("documents", n);
    let ratio = medians[3].zip(medians[0]).filter(|(_, r)| *r > 0.0).map(|(o, r)| o / r);
    report.num("oldest_over_recent", ratio);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_via_link_names_the_recent_document() {
        let doc = r#"<feed><link rel="self" href="http://h/feeds/f/archive/"/><link rel="via" type="application/atom+xml" href="http://h/feeds/f/archive/10000"/></feed>"#;
        assert_eq!(via_number(doc), Some(10000));
        assert_eq!(via_number("<feed/>"), None);
    }
}
