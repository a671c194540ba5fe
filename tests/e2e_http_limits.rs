//! End to end, the HTTP face's request rate and its metrics: a client over its rate gets
//! 429 with `Retry-After` and a JSON error while others go on; admins are not limited; the
//! Prometheus endpoint counts HTTP requests by route and status and shows held long-polls.
//! Its own smartfeeds, with a low rate (the other HTTP tests share one with the default).

use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;
use testkit::Shared;
use testkit::http::{ADMIN, BOT, EVE, HttpFixture, http_table, put_entry};
use testkit::process::free_port;
use testkit::pubsub::entry;
use testkit::smartfeeds::{bot_feeds, scrape_metrics};

/// The shared fixture and smartfeeds' metrics port.
struct Ports {
    fx: HttpFixture,
    metrics: u16,
}

static FX: Shared<Ports> = Shared::new();

fn ports() -> &'static Ports {
    FX.get_or_start(|| {
        let metrics = free_port();
        let fx = HttpFixture::start(|http| {
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
    let text = scrape();
    assert!(
        metric(&text, "smartfeeds_http_requests_total{route=\"/feeds/{feed}/items/{id}\",status=\"200\"}") >= 1.0,
        "{text}"
    );
    assert!(metric(&text, "smartfeeds_http_requests_total{route=\"unmatched\",status=\"404\"}") >= 1.0, "{text}");
    assert!(text.contains("smartfeeds_http_request_seconds_bucket{le="), "{text}");
}
