//! What the component spends reading a request off its link: the bytes through the stream
//! reader (rxml, minidom's tree, the limits) and the stanza typed as the link types it
//! (`xmpp_parsers::stanza::Stanza`), for an items request and for a publish of a 500-byte
//! entry. The typing is xmpp-parsers' code, so this is where its optimisation level shows
//! (see `notes/build-time.md`: it is most of a fresh build's time).
//!
//! `cargo bench --profile profiling --bench request_parse`: per-request times, the median
//! of 5 rounds of 20,000 requests each.

use std::time::{Duration, Instant};
use xmpp::component::stream::{Frame, Limits, Reader};
use xmpp_parsers::stanza::Stanza;

const N: usize = 20_000;

/// The server's stream header, then `n` copies of `stanza`.
fn stream(stanza: &str, n: usize) -> Vec<u8> {
    let mut s = String::from(
        "<stream:stream xmlns='jabber:component:accept' xmlns:stream='http://etherx.jabber.org/streams' \
         from='feeds.localhost' id='bench'>",
    );
    for _ in 0..n {
        s.push_str(stanza);
    }
    s.into_bytes()
}

/// Reads and types every request of `bytes`: the time per request.
fn read_all(rt: &tokio::runtime::Runtime, bytes: &[u8]) -> Duration {
    rt.block_on(async {
        let started = Instant::now();
        let mut reader = Reader::new(bytes, Limits::default());
        let mut typed = 0;
        loop {
            match reader.next().await {
                Frame::Element(el) => {
                    std::hint::black_box(Stanza::try_from(el).expect("a stanza"));
                    typed += 1;
                }
                Frame::End(_) => break,
                other => panic!("not read: {other:?}"),
            }
        }
        assert_eq!(typed, N, "every request read");
        started.elapsed() / N as u32
    })
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let from = "from='reader@localhost/r' to='feeds.localhost'";
    let items = format!(
        "<iq type='get' id='1' {from}><pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='big'/>\
         <set xmlns='http://jabber.org/protocol/rsm'><max>50</max></set></pubsub></iq>"
    );
    let publish = format!(
        "<iq type='set' id='2' {from}><pubsub xmlns='http://jabber.org/protocol/pubsub'><publish node='big'>\
         <item id='p-1'><entry xmlns='http://www.w3.org/2005/Atom'><id>urn:p-1</id><title>Entry</title>\
         <updated>2026-11-29T00:00:00Z</updated><content type='text'>{}</content></entry></item></publish>\
         </pubsub></iq>",
        "lorem ipsum ".repeat(36)
    );
    let (items, publish) = (stream(&items, N), stream(&publish, N));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        a.push(read_all(&rt, &items));
        b.push(read_all(&rt, &publish));
    }
    a.sort();
    b.sort();
    println!(
        "read and typed: items request {:.2} µs, publish request {:.2} µs (medians of 5 rounds of {N})",
        a[2].as_secs_f64() * 1e6,
        b[2].as_secs_f64() * 1e6
    );
}
