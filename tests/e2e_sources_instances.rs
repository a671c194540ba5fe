//! End to end, a source fetched by several instances on one PostgreSQL database (SPEC §12,
//! §13): a private PostgreSQL server, the XMPP server `SMARTFEEDS_TEST_SERVER` selects, two
//! instances of the real binary with one configuration, and a web server of feed documents
//! on loopback. The source is fetched once per interval, by the instance holding its feed's
//! push shard, not by both; when that instance is killed the survivor fetches it. Only the
//! instance that fetches a source subscribes at the source's own hub.

use std::time::{Duration, Instant};
use testkit::instances::{fresh_database, instance_on, instance_with, pushing_pid};
use testkit::process::free_port;
use testkit::source_hub::SourceHub;
use testkit::source_server::{Doc, SourceServer};
use testkit::{Kind, start_selected};

/// The interval of the test's source, seconds (the least allowed).
const INTERVAL: u64 = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_fetches_a_source_per_interval_and_the_survivor_takes_over() {
    let web = SourceServer::start();
    let doc = "<feed xmlns='http://www.w3.org/2005/Atom'><title>w</title>\
               <entry><id>urn:w:1</id><title>one</title><updated>2024-01-01T00:00:00Z</updated></entry></feed>";
    web.set("/web.xml", Doc::atom(doc));
    let host = start_selected();
    let url = fresh_database().await;
    let tables = format!(
        "[sources]\nallow_private = true\n[[feeds]]\nname = \"web\"\nsource = \"{}\"\nsource_interval = {INTERVAL}\n",
        web.url("/web.xml")
    );
    let servers = [host.component_addr()];
    let mut a = instance_on(&host, &url, &servers, free_port(), &tables).await;
    let mut b = instance_on(&host, &url, &servers, free_port(), &tables).await;

    // The first fetch, then exactly one more an interval later: not one per instance.
    let first = web.wait_hits("/web.xml", 1)[0].at;
    // (The source server runs on its own thread: waiting here holds up nothing it needs.)
    let second_at = web.wait_hits_within("/web.xml", 2, Duration::from_secs(INTERVAL + 15))[1].at;
    let gap = second_at.duration_since(first);
    assert!(gap >= Duration::from_secs(INTERVAL - 1), "the second fetch came after {gap:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(web.hits("/web.xml").len(), 2, "one fetch per interval, not one per instance");

    // Kill the instance that fetches (the one holding the feed's push shard): the survivor
    // fetches within seconds, without waiting for an interval.
    let owner = pushing_pid(&url, "web", store_postgres::push_shards::SHARDS).await.expect("an owner of web's shard");
    let killed_at = Instant::now();
    let survivor_pid = if a.pid() == Some(owner) {
        a.kill();
        b.pid()
    } else {
        assert_eq!(b.pid(), Some(owner), "the owner is one of the two");
        b.kill();
        a.pid()
    };
    let third = web.wait_hits_within("/web.xml", 3, Duration::from_secs(25))[2].at;
    assert!(third > killed_at, "the third fetch came after the kill");
    let new_owner = pushing_pid(&url, "web", store_postgres::push_shards::SHARDS).await;
    assert_eq!(new_owner, survivor_pid, "the survivor holds the shard and fetches");
}

/// `POST BASE/hub` with `hub.mode=publish` naming `source`, at the instance on `port`.
async fn ping(port: u16, source: &str) {
    let form = [("hub.mode", "publish"), ("hub.url", source)];
    let res = reqwest::Client::new().post(format!("http://127.0.0.1:{port}/hub")).form(&form).send().await.unwrap();
    assert_eq!(res.status(), 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_instance_that_fetches_a_source_subscribes_at_its_hub() {
    let hub = SourceHub::start(3600);
    let web = SourceServer::start();
    let body = "<feed xmlns='http://www.w3.org/2005/Atom'><title>h</title>\
                <entry><id>urn:h:1</id><title>one</title><updated>2024-01-01T00:00:00Z</updated></entry></feed>";
    let mut doc = Doc::atom(body);
    doc.headers.push(("link".into(), format!("<{}>; rel=\"hub\"", hub.url)));
    web.set("/hubbed.xml", doc);
    let source = web.url("/hubbed.xml");
    let host = start_selected();
    let url = fresh_database().await;
    let tables = format!(
        "[sources]\nallow_private = true\n[[feeds]]\nname = \"hubbed\"\nsource = \"{source}\"\nsource_interval = 3600\n"
    );
    let servers = [host.component_addr()];
    let ports = [free_port(), free_port()];
    let base = |port: u16| format!("http://127.0.0.1:{port}");
    let settings = ports.map(|port| format!("base_url = \"{}\"\n", base(port)));
    let mut a = instance_with(&host, &url, &servers, ports[0], &settings[0], &tables).await;
    let mut b = instance_with(&host, &url, &servers, ports[1], &settings[1], &tables).await;

    // The fetching instance subscribes; its callback is under its own base URL.
    let first = hub.wait_verified(1, Duration::from_secs(20))[0].clone();
    let owner = pushing_pid(&url, "hubbed", store_postgres::push_shards::SHARDS).await.expect("an owner");
    let (owner_port, other_port) = if a.pid() == Some(owner) { (ports[0], ports[1]) } else { (ports[1], ports[0]) };
    assert!(first.callback.starts_with(&format!("{}/sources/", base(owner_port))), "{first:?}");

    // The other instance serves pings (it fetches) but does not subscribe. Its second fetch
    // comes after the first one's subscription would have been asked for.
    for n in 2..=3 {
        ping(other_port, &source).await;
        web.wait_hits("/hubbed.xml", n);
    }
    assert_eq!(hub.requests().len(), 1, "one subscription, the owner's: {:?}", hub.requests());

    // The owner goes: the survivor fetches and subscribes, under its own base URL.
    let survivor = if a.pid() == Some(owner) {
        a.kill();
        b.pid()
    } else {
        b.kill();
        a.pid()
    };
    let requests = hub.wait_verified(2, Duration::from_secs(25));
    assert!(requests[1].callback.starts_with(&format!("{}/sources/", base(other_port))), "{requests:?}");
    assert_eq!(pushing_pid(&url, "hubbed", store_postgres::push_shards::SHARDS).await, survivor);
    assert_eq!(hub.requests().len(), 2, "{:?}", hub.requests());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_stops_fetching_a_source_unsubscribes_at_its_hub() {
    // Sixteen sources, one per push shard (feed ids are dense), each naming one hub.
    let hub = SourceHub::start(3600);
    let web = SourceServer::start();
    let mut tables = String::from("[sources]\nallow_private = true\n");
    for n in 0..16 {
        let body = format!(
            "<feed xmlns='http://www.w3.org/2005/Atom'><title>s{n}</title>\
             <entry><id>urn:s{n}:1</id><title>one</title><updated>2024-01-01T00:00:00Z</updated></entry></feed>"
        );
        let mut doc = Doc::atom(&body);
        doc.headers.push(("link".into(), format!("<{}>; rel=\"hub\"", hub.url)));
        web.set(&format!("/s{n}.xml"), doc);
        tables.push_str(&format!(
            "[[feeds]]\nname = \"s{n}\"\nsource = \"{}\"\nsource_interval = 3600\n",
            web.url(&format!("/s{n}.xml"))
        ));
    }
    // ejabberd, whichever server is selected: it takes both instances' component links at
    // once, so the second takes its share of the shards while the first runs (with
    // Prosody it would stand by until the first goes).
    let host = Kind::Ejabberd.start();
    let url = fresh_database().await;
    let servers = [host.component_addr()];
    let ports = [free_port(), free_port()];
    let base = |port: u16| format!("http://127.0.0.1:{port}");
    let settings = ports.map(|port| format!("base_url = \"{}\"\n", base(port)));
    // The first instance alone fetches every source and subscribes to each.
    let a = instance_with(&host, &url, &servers, ports[0], &settings[0], &tables).await;
    hub.wait_verified(16, Duration::from_secs(30));
    // A second one takes its share of the shards: the first unsubscribes the sources it no
    // longer fetches, at once (not at its next fetch, an hour away), and the second
    // subscribes to them.
    let b = instance_with(&host, &url, &servers, ports[1], &settings[1], &tables).await;
    // Once the shares settle, each source has exactly one subscription in force at the hub
    // (subscribed and not unsubscribed), the one of the instance that fetches it.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let requests = hub.requests();
        let verified = |mode: &str, topic: &str| -> Vec<String> {
            let matching = requests.iter().filter(|r| r.mode == mode && r.topic == topic && r.verified.is_some());
            matching.map(|r| r.callback.clone()).collect()
        };
        let mut settled = !verified_any(&requests, "unsubscribe").is_empty();
        let mut owners = [0, 0];
        for n in 0..16 {
            let topic = web.url(&format!("/s{n}.xml"));
            let gone = verified("unsubscribe", &topic);
            let live: Vec<String> = verified("subscribe", &topic).into_iter().filter(|c| !gone.contains(c)).collect();
            let owner = pushing_pid(&url, &format!("s{n}"), store_postgres::push_shards::SHARDS).await;
            let Some(i) = [a.pid(), b.pid()].iter().position(|p| owner.is_some() && *p == owner) else {
                settled = false;
                continue;
            };
            owners[i] += 1;
            settled &= live.len() == 1 && live[0].starts_with(&format!("{}/sources/", base(ports[i])));
        }
        if settled && owners[0] > 0 && owners[1] > 0 {
            break;
        }
        let seen: Vec<(String, String, String)> =
            requests.iter().map(|r| (r.mode.clone(), r.topic.clone(), r.callback.clone())).collect();
        assert!(
            Instant::now() < deadline,
            "not one subscription per source, its fetcher's (owners {owners:?}): {seen:?}\n--- a ---\n{}\n--- b ---\n{}",
            a.log_tail(30),
            b.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The callbacks of the verified requests of `mode`.
fn verified_any(requests: &[testkit::source_hub::SubRequest], mode: &str) -> Vec<String> {
    requests.iter().filter(|r| r.mode == mode && r.verified.is_some()).map(|r| r.callback.clone()).collect()
}
