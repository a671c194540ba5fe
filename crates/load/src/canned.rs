//! `canned`: a component that answers every pubsub `<items/>` request with one page,
//! always the same, and does nothing else: what the XMPP server in front costs with a
//! service that costs nothing, the baseline of `pull`.
//!
//! The page is the one smartfeeds answers: the tool asks the service (`--service`) for the
//! first page of `--node` once, and writes the entries it got back with smartfeeds' own
//! writer (`smartfeeds_xmpp::ready_pages` and `reply`, into a component stream as smartfeeds'
//! link encodes it). smartfeeds stores an entry as minidom writes it, so writing the received entries
//! again with minidom gives the stored text, and the page's bytes are those smartfeeds
//! sends, but for the iq's own attributes (`from` is this component's domain, `to` and `id`
//! the request's). Only entries are carried as such (tombstones would be written as
//! received); a benchmark node has none.
//!
//! Each request is then answered with the iq's start tag formatted and the page's bytes
//! after it, shared. It serves until `--duration` is over or it is sent SIGTERM or SIGINT,
//! then prints what it answered and its CPU.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use clap::Args;
use feed::{Item, Payload};
use minidom::Element;
use xmpp::ready_pages::{ItemXml, page_body};
use xmpp::reply::{ItemsReply, Reply};
use xmpp_parsers::rsm::SetResult;

use crate::report::Tally;
use crate::scan;
use crate::stanzas::{NS_PUBSUB, NS_RSM, PageAsk, esc, items_query, outcome};
use crate::{Ctx, Report};

#[derive(Args, Debug, Clone)]
pub struct CannedArgs {
    /// Items in the page (RSM `<max>` of the one request to the service).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max: u32,
}

/// The page after its iq's start tag, as bytes.
pub fn canned_page(domain: &str, reply: &Element) -> Result<Vec<u8>, String> {
    let pubsub = reply.get_child("pubsub", NS_PUBSUB).ok_or("a result without <pubsub/>")?;
    let items = pubsub.get_child("items", NS_PUBSUB).ok_or("a result without <items/>")?;
    let node = items.attr("node").unwrap_or_default().to_string();
    let page: Vec<Item> = items
        .children()
        .filter(|c| c.name() == "item")
        .map(|item| {
            let entry = item.children().next().map(String::from).unwrap_or_default();
            Item::bare(item.attr("id").unwrap_or_default().to_string(), 0, Payload::Entry(entry))
        })
        .collect();
    let set = match pubsub.get_child("set", NS_RSM) {
        Some(set) => Some(SetResult::try_from(set.clone()).map_err(|e| format!("its <set/>: {e}"))?),
        None => None,
    };
    let forms: Vec<Arc<ItemXml>> = page.iter().map(|i| Arc::new(ItemXml::of(i))).collect();
    let body = page_body(&node, &forms, set.as_ref()).map_err(|e| format!("cannot write the page: {e}"))?;
    let jid = |s: &str| s.parse::<jid::Jid>().map_err(|e| format!("{s}: {e}"));
    let reply = Reply::Items(ItemsReply::new(jid(domain)?, jid("to.invalid")?, "id".into(), body.into()));
    let mut buf = xmpp::stanza_parts::XmlBuf::within(&[], 64 * 1024);
    buf.put(&reply).map_err(|e| format!("cannot write the page: {e}"))?;
    let bytes = buf.bytes();
    let head_end = bytes.iter().position(|&b| b == b'>').ok_or("no start tag")? + 1;
    Ok(bytes[head_end..].to_vec())
}

/// Whether an iq request (as bytes) asks for pubsub items.
fn asks_items(el: &[u8]) -> bool {
    scan::attr(el, "type").as_deref() == Some("get")
        && scan::child(el, "pubsub", NS_PUBSUB).is_some_and(|p| scan::child(p, "items", NS_PUBSUB).is_some())
}

pub async fn run(ctx: &Ctx, args: &CannedArgs) -> Result<Report, String> {
    let c = &ctx.common;
    let query = items_query(&c.node, &PageAsk::Rsm { max: args.max, after: None });
    let reply = ctx.link.iq("get", None, &c.service, &query, ctx.timeout()).await.map_err(|e| e.to_string())?;
    outcome(&reply).map_err(|e| format!("{} answered {e}", c.service))?;
    let domain = ctx.link.domain().to_string();
    let body: Arc<[u8]> = canned_page(&domain, &reply)?.into();
    let answered = Arc::new(AtomicU64::new(0));
    {
        let (body, answered, from) = (body.clone(), answered.clone(), esc(&domain).into_owned());
        ctx.link.answer_with(Box::new(move |el| {
            if !asks_items(el) {
                return None;
            }
            answered.fetch_add(1, Ordering::Relaxed);
            let to = scan::attr(el, "from").unwrap_or_default();
            let id = scan::attr(el, "id").unwrap_or_default();
            let head = format!("<iq type='result' from='{from}' to='{}' id='{}'>", esc(&to), esc(&id));
            Some((head, body.clone()))
        }));
    }
    eprintln!("smartfeeds-load: canned: serving {} bytes per page of {} as {domain}", body.len(), c.node);
    let cpu = ctx.cpu_window();
    let started = Instant::now();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    tokio::select! {
        _ = tokio::time::sleep_until(ctx.deadline.into()) => {}
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    let elapsed = started.elapsed();
    let cpu = cpu.finish();
    let pages = answered.load(Ordering::Relaxed);
    let mut report = ctx.report("canned");
    report.standard(pages, &mut Tally::default(), elapsed, &cpu);
    report.int("page_bytes", body.len() as u64);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_written_as_smartfeeds_writes_it() {
        // As minidom writes it, and so as smartfeeds stores it.
        let entry = "<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:1</id><title>a &amp; b</title></entry>";
        let routed: Element = format!(
            "<iq xmlns='jabber:component:accept' type='result' id='l1'><pubsub xmlns='{NS_PUBSUB}'>\
             <items node='bench'><item id='i1'>{entry}</item></items><set xmlns='{NS_RSM}'>\
             <first index='0'>cursor:1_0_1</first><last>cursor:1_0_1</last><count>7</count></set></pubsub></iq>"
        )
        .parse()
        .unwrap();
        let body = String::from_utf8(canned_page("canned.localhost", &routed).unwrap()).unwrap();
        assert_eq!(
            body,
            format!(
                "<pubsub xmlns='{NS_PUBSUB}'><items node='bench'><item id='i1'>{entry}</item></items>\
                 <set xmlns='{NS_RSM}'><first index='0'>cursor:1_0_1</first><last>cursor:1_0_1</last>\
                 <count>7</count></set></pubsub></iq>"
            )
        );
        let request = format!(
            "<iq type='get' id='l2' from='a@b'><pubsub xmlns='{NS_PUBSUB}'><items node='bench'/></pubsub></iq>"
        );
        assert!(asks_items(request.as_bytes()));
        assert!(!asks_items(b"<iq type='get' id='x'><query xmlns='http://jabber.org/protocol/disco#info'/></iq>"));
    }
}
