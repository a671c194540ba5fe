//! Arbitrary bytes through what a peer can reach: the component's stream reader (with small
//! limits, so they are hit), stanza parsing, the router and the core, with an in-memory
//! store. Nothing here may panic, and every get or set must get exactly one reply.
//!
//! `scripts/fuzz.sh SECONDS` runs it for a bounded time.
#![no_main]

use feed::service::Service;
use feed::{NodeName, Position};
use libfuzzer_sys::fuzz_target;
use smartfeeds::config::Config;
use std::sync::{Arc, OnceLock};
use store_sqlite::SqliteStore;
use xmpp::component::stream::{Frame, Limits, Reader};
use xmpp::router::Router;
use xmpp_parsers::iq::Iq;
use xmpp_parsers::stanza::Stanza;

struct World {
    rt: tokio::runtime::Runtime,
    router: Router<SqliteStore>,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let config = Config::parse(
            "admins = [\"admin@localhost\"]\nautocreate = true\n[component]\njid = \"feeds.localhost\"\nsecret = \"s\"\n\
             [limits]\nmax_payload_bytes = 2048\n[[feeds]]\nname = \"c\"\npublishers = [\"bot@localhost\"]\n\
             [[feeds]]\nname = \"w\"\naccess = \"whitelist\"\nallowed = [\"*@example.net\"]\n",
        )
        .unwrap();
        let svc = Service::new(SqliteStore::open_in_memory(None).unwrap(), Arc::new(config.policy()), Arc::new(|| 1_700_000_000_000));
        rt.block_on(svc.init()).unwrap();
        World { rt, router: Router::new(svc, "feeds.localhost".parse().unwrap()) }
    })
}

/// The server's stream header, as Prosody sends it.
const HEADER: &str = "<?xml version='1.0'?><stream:stream xmlns='jabber:component:accept' \
    xmlns:stream='http://etherx.jabber.org/streams' id='fuzz' from='feeds.localhost'>";

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = NodeName::parse(text);
        let _ = Position::parse(text);
    }
    // Bytes that do not start a stanza are wrapped in an iq from an admin, so that payloads
    // reach the router too.
    let body: Vec<u8> = if data.starts_with(b"<iq") || data.starts_with(b"<message") || data.starts_with(b"<presence") {
        data.to_vec()
    } else {
        let mut b = b"<iq type='set' id='f' from='admin@localhost/r' to='feeds.localhost'>".to_vec();
        b.extend_from_slice(data);
        b.extend_from_slice(b"</iq>");
        b
    };
    let input = [HEADER.as_bytes(), &body].concat();
    let limits = Limits { max_stanza_bytes: 4096, max_depth: 16 };
    let w = world();
    w.rt.block_on(async {
        let mut reader = Reader::new(&input[..], limits);
        loop {
            match reader.next().await {
                Frame::Element(element) => {
                    let Ok(Stanza::Iq(iq)) = Stanza::try_from(element) else { continue };
                    let is_request = matches!(iq, Iq::Get { from: Some(_), .. } | Iq::Set { from: Some(_), .. });
                    let reply = w.router.handle_iq(iq).await;
                    assert_eq!(reply.is_some(), is_request, "exactly one reply to a get or set with a sender");
                }
                // The link answers these itself (bad-request or policy-violation).
                Frame::Dropped { header, why, .. } => assert!(!why.is_empty(), "{header:?} dropped without a reason"),
                Frame::End(_) => break,
            }
        }
    });
});
