//! Arbitrary bytes through what a peer can reach: XML parsing, stanza parsing, the router and
//! the core, with an in-memory store. Nothing here may panic, and every get or set must get
//! exactly one reply.
//!
//! `scripts/fuzz.sh SECONDS` runs it for a bounded time.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smartfeeds::config::Config;
use smartfeeds::feed::service::Service;
use smartfeeds::feed::{NodeName, Position};
use smartfeeds::store::sqlite::SqliteStore;
use smartfeeds::xmpp::router::Router;
use std::sync::{Arc, OnceLock};
use xmpp_parsers::iq::Iq;

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
        let svc = Service::new(SqliteStore::open_in_memory(None).unwrap(), Arc::new(config), Arc::new(|| 1_700_000_000_000));
        rt.block_on(svc.init()).unwrap();
        World { rt, router: Router::new(svc, "feeds.localhost".parse().unwrap()) }
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = NodeName::parse(text);
    let _ = Position::parse(text);
    // Stanzas arrive in the component namespace; wrap bare payloads in an iq from a user.
    let xml = if text.starts_with("<iq") {
        text.replacen("<iq", "<iq xmlns='jabber:component:accept'", 1)
    } else {
        format!("<iq xmlns='jabber:component:accept' type='set' id='f' from='admin@localhost/r' to='feeds.localhost'>{text}</iq>")
    };
    let Ok(element) = xml.parse::<minidom::Element>() else { return };
    let Ok(iq) = Iq::try_from(element) else { return };
    let is_request = matches!(iq, Iq::Get { from: Some(_), .. } | Iq::Set { from: Some(_), .. });
    let w = world();
    let reply = w.rt.block_on(w.router.handle_iq(iq));
    assert_eq!(reply.is_some(), is_request, "exactly one reply to a get or set with a sender");
});
