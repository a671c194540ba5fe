//! End to end, the HTTP face's request rate and its metrics: a client over its rate gets
//! 429 with `Retry-After` and a JSON error while others go on; admins are not limited; the
//! Prometheus endpoint counts HTTP requests by route and status and shows held long-polls.
//! Behind trusted proxies, each client's own address has its rate; from any other peer the
//! forwarding headers count for nothing. Its own smartfeeds, with a low rate (the other
//! HTTP tests share one with the default).

use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;
use testkit::Shared;
use testkit::http::{ADMIN, BOT, EVE, HttpFixture, http_table, put_entry};
use testkit::pubsub::entry;
use testkit::smartfeeds::{bot_feeds, scrape_metrics};
use testkit::standalone::Standalone;

/// The shared fixture and smartfeeds' metrics port.
struct Ports {
    fx: HttpFixture,
    metrics: u16,
}

static FX: Shared<Ports> = Shared::new();

fn ports() -> &'static Ports {
    FX.get_or_start(|| {
        let (fx, metrics) = HttpFixture::start_with_metrics(|http, metrics| {
            format!(
                r#"
[limits]
requests_per_second = 2
request_burst = 3
request_backlog = 2

[metrics]
listen = "127.0.0.1:{metrics}"

{}
{}"#,
                http_table(http, "", &["eve", "admin", "bot"]),
                bot_feeds(&["rated"])
            )
        });
        Ports { fx, metrics }
    })
}

fn url(path: &str) -> String {
    ports().fx.url(path)
}

fn scrape() -> String {
    scrape_metrics(ports().metrics)
}

/// The value of the sample `name` (labels included), 0 when absent.
fn metric(text: &str, name: &str) -> f64 {
    testkit::smartfeeds::metric(text, name).unwrap_or(0.0)
}

async fn get_as(client: &reqwest::Client, token: &str) -> StatusCode {
    client.get(url("/feeds/rated/")).bearer_auth(token).send().await.expect("GET").status()
}

#[tokio::test]
async fn a_client_over_its_rate_gets_429_while_others_go_on() {
    ports();
    let client = reqwest::Client::new();
    // Burst 3, then 2 more wait in the backlog: of 12 at once, some are refused.
    let answers =
        futures::future::join_all((0..12).map(|_| client.get(url("/feeds/rated/")).bearer_auth(EVE).send())).await;
    let mut refused = None;
    let mut ok = 0;
    for res in answers {
        let res = res.expect("an answer");
        match res.status() {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => refused = Some(res),
            other => panic!("unexpected {other}"),
        }
    }
    assert!(ok >= 3, "the burst is served ({ok})");
    let res = refused.expect("a flood past burst and backlog is refused");
    let retry: u64 = res.headers()["retry-after"].to_str().unwrap().parse().expect("Retry-After seconds");
    assert!(retry >= 1);
    let body: Value = res.json().await.expect("a JSON error");
    assert_eq!(body["error"], "resource-constraint", "{body}");
    // Eve's flood does not slow others: the admin is never limited, and another client
    // (anonymous, by address) has its own rate.
    for _ in 0..10 {
        assert_eq!(get_as(&client, ADMIN).await, StatusCode::OK);
    }
    let res = client.get(url("/feeds/rated/")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    // Eve may go on once her rate allows.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(get_as(&client, EVE).await, StatusCode::OK);

    let text = scrape();
    let refused = metric(&text, "smartfeeds_http_requests_total{route=\"/feeds/{feed}/\",status=\"429\"}");
    assert!(refused >= 1.0, "429s are counted:\n{text}");
    let served = metric(&text, "smartfeeds_http_requests_total{route=\"/feeds/{feed}/\",status=\"200\"}");
    assert!(served >= 14.0, "200s are counted ({served}):\n{text}");
}

#[tokio::test]
async fn metrics_show_held_long_polls_and_count_routes() {
    ports();
    let client = reqwest::Client::new();
    let held = "smartfeeds_http_held{kind=\"longpoll\"}";
    let before = metric(&scrape(), held);
    // Two long-polls held on the feed (as the admin: no rate in the way).
    let poll = || {
        client
            .get(url("/feeds/rated/?order=created&since=time:2100-01-01T00:00:00Z&timeout=20"))
            .bearer_auth(ADMIN)
            .send()
    };
    let (a, b) = (tokio::spawn(poll()), tokio::spawn(poll()));
    let mut seen = before;
    for _ in 0..100 {
        seen = metric(&scrape(), held);
        if seen >= before + 2.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen, before + 2.0, "both long-polls are counted as held");
    a.abort();
    b.abort();
    for _ in 0..100 {
        seen = metric(&scrape(), held);
        if seen == before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen, before, "a long-poll whose client left is no longer held");
    // A publish over HTTP and an unknown route are counted under their routes.
    let res = put_entry(&client, &ports().fx.base, "rated", "m1", BOT, &entry("urn:m1", "m", None, &[])).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(client.get(url("/nowhere")).bearer_auth(ADMIN).send().await.unwrap().status(), StatusCode::NOT_FOUND);
    // A held long-poll is counted under its route when it is answered, not before.
    let pulls = "smartfeeds_http_requests_total{route=\"/feeds/{feed}/\",status=\"200\"}";
    let counted = metric(&scrape(), pulls);
    let poll = client.get(url("/feeds/rated/?order=created&since=id:m1&timeout=20")).bearer_auth(ADMIN).send();
    let poll = tokio::spawn(poll);
    for _ in 0..100 {
        if metric(&scrape(), held) == before + 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(metric(&scrape(), held), before + 1.0, "the long-poll is held");
    assert_eq!(metric(&scrape(), pulls), counted, "a held long-poll is not counted yet");
    let res = put_entry(&client, &ports().fx.base, "rated", "m2", BOT, &entry("urn:m2", "m", None, &[])).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let answer = poll.await.unwrap().expect("the long-poll's answer");
    assert_eq!(answer.status(), StatusCode::OK);
    assert!(answer.headers().get("content-length").is_some_and(|l| l != "0"), "{:?}", answer.headers());
    let doc: Value = answer.json().await.expect("a JSON page");
    assert_eq!(doc["items"][0]["id"], "m2", "{doc}");
    assert_eq!(metric(&scrape(), pulls), counted + 1.0, "the answered long-poll is counted");
    // One that ends at its deadline with the client's copy current is counted as the 304 it
    // ends with (what the layers saw of it was a stand-in).
    let not_modified = "smartfeeds_http_requests_total{route=\"/feeds/{feed}/\",status=\"304\"}";
    let (counted, counted_304) = (metric(&scrape(), pulls), metric(&scrape(), not_modified));
    let empty = client.get(url("/feeds/rated/?order=created&since=id:m2&timeout=0")).bearer_auth(ADMIN).send().await;
    let etag = empty.unwrap().headers()["etag"].clone();
    let poll = client.get(url("/feeds/rated/?order=created&since=id:m2&timeout=1")).header("if-none-match", etag);
    let answer = poll.bearer_auth(ADMIN).send().await.expect("the long-poll's answer");
    assert_eq!(answer.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(metric(&scrape(), not_modified), counted_304 + 1.0, "the held long-poll counted as its 304");
    assert_eq!(metric(&scrape(), pulls), counted + 1.0, "the empty page before it, and nothing more");
    let text = scrape();
    assert!(
        metric(&text, "smartfeeds_http_requests_total{route=\"/feeds/{feed}/items/{id}\",status=\"200\"}") >= 1.0,
        "{text}"
    );
    assert!(metric(&text, "smartfeeds_http_requests_total{route=\"unmatched\",status=\"404\"}") >= 1.0, "{text}");
    assert!(text.contains("smartfeeds_http_request_seconds_bucket{le="), "{text}");
}

/// How many of `n` anonymous GETs sent at once are refused (429), each with the
/// forwarding header `header` set to what `value` makes of its number.
async fn refused_of(sf: &Standalone, n: usize, header: &str, value: impl Fn(usize) -> String) -> usize {
    let client = reqwest::Client::new();
    let url = format!("{}/feeds/rated/", sf.base);
    let sent = (0..n).map(|i| client.get(&url).header(header, value(i)).send());
    let mut refused = 0;
    for res in futures::future::join_all(sent).await {
        match res.expect("an answer").status() {
            StatusCode::OK => {}
            StatusCode::TOO_MANY_REQUESTS => refused += 1,
            other => panic!("unexpected {other}"),
        }
    }
    refused
}

#[tokio::test]
async fn forwarding_headers_name_the_client_only_from_a_trusted_proxy() {
    let limits = "[limits]\nrequests_per_second = 0.5\nrequest_burst = 2\nrequest_backlog = 0\n";
    // Trusted: each forwarded address has its own rate; one address keeps its limit.
    let sf = Standalone::start("trusted_proxies = [\"10.0.0.0/8\", \"127.0.0.1\"]\n", &["rated"], limits);
    let clients = |i: usize| format!("198.51.100.{}, 10.1.1.1", i + 1);
    assert_eq!(refused_of(&sf, 8, "x-forwarded-for", clients).await, 0, "eight clients behind the proxy");
    let one = |_| "203.0.113.5".to_string();
    assert!(refused_of(&sf, 8, "x-forwarded-for", one).await >= 5, "one client over its rate");
    // The proxy writes X-Forwarded-For: a client's own Forwarded header is passed on as it
    // sent it and names whom it likes. Not believed, it leaves every request on one bucket.
    let forwarded = |i: usize| format!("for=\"[2001:db8::{:x}]:4711\";proto=https", i + 1);
    assert!(refused_of(&sf, 8, "forwarded", forwarded).await >= 5, "a client's Forwarded is not believed");
    // Behind a proxy that writes RFC 7239's header, that one names the clients.
    let sf = Standalone::start("trusted_proxies = [\"127.0.0.1\"]\nproxy_header = \"forwarded\"\n", &["rated"], limits);
    assert_eq!(refused_of(&sf, 8, "forwarded", forwarded).await, 0, "RFC 7239's header, when the proxy writes it");
    // Not trusted (another peer than the proxies named, or none named): the headers are
    // ignored, and every request counts against the peer's own address.
    for trusted in ["trusted_proxies = [\"10.0.0.0/8\"]\n", ""] {
        let sf = Standalone::start(trusted, &["rated"], limits);
        assert!(refused_of(&sf, 8, "x-forwarded-for", clients).await >= 5, "[http] {trusted}");
    }
}

/// A stop answers held long-polls at once (200, an empty page) and ends event streams, and
/// the service exits 0 soon after, however long the long-polls asked to wait. Its own
/// smartfeeds, which this test stops.
#[tokio::test]
async fn a_stop_answers_held_long_polls_and_ends_event_streams() {
    let (mut fx, metrics) = HttpFixture::start_with_metrics(|http, metrics| {
        format!(
            "{}\n[metrics]\nlisten = \"127.0.0.1:{metrics}\"\n\n{}",
            http_table(http, "", &["bot"]),
            bot_feeds(&["stopping"])
        )
    });
    let client = reqwest::Client::new();
    let res = put_entry(&client, &fx.base, "stopping", "s1", BOT, &entry("urn:s1", "s", None, &[])).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let poll = client.get(fx.url("/feeds/stopping/?order=created&since=id:s1&timeout=120")).bearer_auth(BOT).send();
    let poll = tokio::spawn(poll);
    let mut stream = client
        .get(fx.url("/feeds/stopping/?order=created"))
        .bearer_auth(BOT)
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("an event stream");
    assert_eq!(stream.status(), StatusCode::OK);
    let held = |kind: &str| {
        let name = format!("smartfeeds_http_held{{kind=\"{kind}\"}}");
        testkit::smartfeeds::metric(&scrape_metrics(metrics), &name).unwrap_or(0.0)
    };
    for _ in 0..100 {
        if held("longpoll") == 1.0 && held("stream") == 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!((held("longpoll"), held("stream")), (1.0, 1.0), "both requests are held");

    let started = std::time::Instant::now();
    let stopping = tokio::task::spawn_blocking(move || fx.fx.feeds.stop());
    let answer = tokio::time::timeout(Duration::from_secs(10), poll).await;
    let answer = answer.expect("the long-poll is answered at the stop").unwrap().expect("an answer, not an error");
    assert_eq!(answer.status(), StatusCode::OK);
    let doc: Value = answer.json().await.expect("a JSON page");
    assert_eq!(doc["count"], 0, "{doc}");
    let ended =
        tokio::time::timeout(Duration::from_secs(10), async { while let Ok(Some(_)) = stream.chunk().await {} }).await;
    assert!(ended.is_ok(), "the event stream ends at the stop");
    let status = stopping.await.unwrap().expect("smartfeeds was running");
    assert!(status.success(), "exits 0: {status:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "stopped in {:?}", started.elapsed());
}

/// A fixture whose port another process takes between its pick and smartfeeds' bind is
/// started again on fresh ports, rather than failing a test for its neighbour (seen when the
/// whole suite runs: "Address already in use" on a metrics port). The test harness's own
/// robustness, checked with a port held here.
#[test]
fn a_fixture_whose_port_was_taken_starts_again_on_another() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    let taken = taken.local_addr().expect("its address").port();
    let tries = std::sync::atomic::AtomicUsize::new(0);
    let fx = HttpFixture::start(|port| {
        let first = tries.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
        let port = if first { taken } else { port };
        format!("{}{}", http_table(port, "", &["bot"]), bot_feeds(&["again"]))
    });
    assert_eq!(tries.into_inner(), 2, "started again once");
    let port: u16 = fx.base.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port in the base URL");
    assert_ne!(port, taken);
    assert!(testkit::process::port_open(port), "serving on {port}");
}
