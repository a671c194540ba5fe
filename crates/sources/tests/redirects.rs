//! Redirects of a source to an address the guard refuses (SPEC §13, safety): every hop is
//! checked like the first, before it is connected to. Real HTTP servers on two loopback
//! addresses; the guard is the test-only one that treats `127.0.0.1` as public and refuses
//! `127.0.0.2` like any private address, so the first hop is allowed and the second is not.

use outbound::{Client, Guard, OutboundConfig, Refused};
use smartfeeds_sources::config::Location;
use smartfeeds_sources::fetch::{Answer, FetchError, Fetcher};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;
use testkit::dns::Dns;
use testkit::source_server::{Doc, SourceServer};
use url::Url;

const ALLOWED: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const REFUSED: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

fn fetcher(dns: &Dns, public: &[Ipv4Addr]) -> Fetcher {
    let public: Vec<IpAddr> = public.iter().copied().map(IpAddr::V4).collect();
    let config = OutboundConfig { nameservers: vec![dns.addr] };
    let guard = Guard::for_tests_treating_as_public(&config, &public).unwrap();
    let client = Client::new(guard, Duration::from_secs(5), 1, "test").unwrap();
    Fetcher { client, max_bytes: 1 << 20 }
}

fn web(url: &str) -> Location {
    Location::Web(Url::parse(url).unwrap())
}

#[tokio::test]
async fn a_redirect_to_a_refused_address_is_refused_before_it_is_connected_to() {
    let first = SourceServer::start_on(ALLOWED);
    let second = SourceServer::start_on(REFUSED);
    second.set("/feed.xml", Doc::atom("<feed xmlns='http://www.w3.org/2005/Atom'><title>t</title></feed>"));
    let port = second.base.rsplit(':').next().unwrap();
    let dns = Dns::start().await;
    dns.answer("second.test", &["127.0.0.2"]);
    // One hop by address, one by a name that resolves to it.
    first.set("/by-address", Doc::redirect(302, &second.url("/feed.xml")));
    first.set("/by-name", Doc::redirect(301, &format!("http://second.test:{port}/feed.xml")));

    let strict = fetcher(&dns, &[ALLOWED]);
    let err = strict.fetch(&web(&first.url("/by-address")), None).await.unwrap_err();
    assert!(matches!(err, FetchError::Refused(Refused::Private)), "{err}");
    let err = strict.fetch(&web(&first.url("/by-name")), None).await.unwrap_err();
    assert!(err.to_string().contains("resolves to a private"), "{err}");
    let err = strict.fetch(&web(&second.url("/feed.xml")), None).await.unwrap_err();
    assert!(matches!(err, FetchError::Refused(Refused::Private)), "the refused address as a first hop: {err}");
    assert_eq!(first.hits("/by-address").len(), 1, "the first hop was allowed and asked");
    assert_eq!(first.hits("/by-name").len(), 1, "the first hop was allowed and asked");
    assert!(!dns.answered("second.test").is_empty(), "the name was resolved by the guard");
    assert!(second.hits("/feed.xml").is_empty(), "the refused address was reached");

    // The same redirects, with a guard that allows both: the second hop is reached.
    let lax = fetcher(&dns, &[ALLOWED, REFUSED]);
    for path in ["/by-address", "/by-name"] {
        let fetched = lax.fetch(&web(&first.url(path)), None).await.unwrap();
        assert!(matches!(fetched.answer, Answer::Document(_)), "{path}");
    }
    assert_eq!(second.hits("/feed.xml").len(), 2);
}
