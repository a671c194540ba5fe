//! What the component spends on a MAM page beside an items page of the same view: the
//! request served by the router (parsed, read or found kept, answered) and the reply
//! written as the link writes it, in a feed of 500 items, pages of 50. Both warm (the page
//! kept for the feed's generation, as under load) and cold (made anew: a fresh cache each
//! time). The server's routing is not in it: `scripts/bench-peers.sh` has the whole path,
//! where a MAM page is also 50 messages for the server to route instead of one iq.
//!
//! `cargo bench --bench mam_pages`: per-request times (median of 5 rounds, alternating) and
//! the ratio MAM / items.

use feed::service::{Service, system_clock};
use feed::{Entry, Store};
use smartfeeds::config::Config;
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::memory_store::MemoryStore;
use xmpp::ready_pages::Ready;
use xmpp::router::Router;
use xmpp::stanza_parts::XmlBuf;
use xmpp_parsers::iq::Iq;

const ADMIN: &str = "admin@localhost";
const ITEMS: usize = 500;
const PAGE: usize = 50;

fn service(rt: &tokio::runtime::Runtime) -> Service<MemoryStore> {
    let config = Config::parse(&format!(
        "admins = [\"{ADMIN}\"]\n[component]\njid = \"feeds.localhost\"\nsecret = \"s\"\n[[feeds]]\nname = \"big\"\n"
    ))
    .unwrap();
    let svc = Service::new(MemoryStore::new(None), Arc::new(config.policy()), system_clock());
    rt.block_on(async {
        svc.init().await.unwrap();
        for n in 0..ITEMS {
            let id = format!("i{n}");
            let xml = format!(
                "<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:{id}</id><title>Item {n}</title>\
                 <updated>2024-01-01T00:00:00Z</updated><content type='html'>{}</content></entry>",
                "&lt;p&gt;text&lt;/p&gt; ".repeat(20)
            );
            let entry = Entry { xml, atom_id: Some(format!("urn:{id}")), author: None, categories: vec![] };
            svc.publish(ADMIN, "big", Some(id), entry).await.unwrap();
        }
    });
    svc
}

fn request(xml: &str) -> Iq {
    let el: minidom::Element = xml.parse().unwrap();
    Iq::try_from(el).unwrap()
}

/// One request through the router and its reply written: the bytes written.
async fn serve<S: Store>(router: &Router<S>, iq: Iq) -> usize {
    let served = router.handle_iq(iq).await.expect("a reply");
    let mut buf = XmlBuf::in_component_stream(64 << 10);
    buf.put(&served.reply).unwrap();
    buf.len()
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let svc = service(&rt);
    let me: jid::Jid = "feeds.localhost".parse().unwrap();
    let ns = "xmlns='jabber:component:accept'";
    let from = "from='reader@localhost/r' to='feeds.localhost'";
    let items = format!(
        "<iq {ns} type='get' id='1' {from}><pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='big'/>\
         <set xmlns='http://jabber.org/protocol/rsm'><max>{PAGE}</max></set></pubsub></iq>"
    );
    let mam = format!(
        "<iq {ns} type='set' id='1' {from}><query xmlns='urn:xmpp:mam:2' queryid='q' node='big'>\
         <set xmlns='http://jabber.org/protocol/rsm'><max>{PAGE}</max></set></query></iq>"
    );
    let router = |ready: Arc<Ready>| Router::new(svc.clone(), me.clone(), ready);
    let warm = router(Arc::new(Ready::new(feed::generations::Generations::local())));
    let (items_bytes, mam_bytes) =
        rt.block_on(async { (serve(&warm, request(&items)).await, serve(&warm, request(&mam)).await) });
    println!("a page of {PAGE}: items reply {items_bytes} bytes, MAM answer {mam_bytes} bytes");
    let time = |cold: bool, xml: &str, n: u32| -> Duration {
        rt.block_on(async {
            let started = Instant::now();
            for _ in 0..n {
                let r = if cold {
                    router(Arc::new(Ready::new(feed::generations::Generations::local())))
                } else {
                    warm.clone()
                };
                std::hint::black_box(serve(&r, request(xml)).await);
            }
            started.elapsed() / n
        })
    };
    for (cold, n) in [(false, 20_000), (true, 2_000)] {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            a.push(time(cold, &items, n));
            b.push(time(cold, &mam, n));
        }
        a.sort();
        b.sort();
        let (a, b) = (a[2], b[2]);
        let what = if cold { "cold (made anew)" } else { "warm (kept)" };
        println!(
            "{what:18} items page {:7.1} µs   MAM page {:7.1} µs   MAM / items {:.2}",
            a.as_secs_f64() * 1e6,
            b.as_secs_f64() * 1e6,
            b.as_secs_f64() / a.as_secs_f64()
        );
    }
}
