//! `http-publish`: N Atom entries, K in flight, each a `PUT BASE/feeds/FEED/items/ID` with
//! its own id (`PREFIX-i`), counted as a success only on a 2xx (sent after the commit).

use super::{HttpCtx, kind};
use crate::publish::{EntryArgs, measure};
use crate::report::Report;
use crate::stanzas::atom_entry;

/// PUTs one entry; the answer's body, or the kind of failure.
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

pub async fn run(ctx: &HttpCtx, args: &EntryArgs) -> Result<Report, String> {
    let send = |_: u64, id: String, title: String, padding: usize| async move {
        put(ctx, &id, &title, padding).await.map(drop)
    };
    Ok(measure(&ctx.common.run, ctx.deadline, args, "h", ctx.report("publish"), send).await)
}
