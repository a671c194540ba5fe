//! The Prometheus endpoint, scraped over HTTP while the component serves a real XMPP server
//! (Prosody or ejabberd, see `crates/testkit/src/server/select.rs`).

use testkit::pubsub::*;
use testkit::smartfeeds::{Smartfeeds, scrape_metrics as scrape};
use testkit::stanza_type;
use testkit::start_selected;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_pushes_and_commits() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let host = start_selected();
    let tables = format!(
        "[metrics]\nlisten = \"127.0.0.1:{port}\"\n\n[[feeds]]\nname = \"news\"\npublishers = [\"bot@localhost\"]\n"
    );
    let sf = Smartfeeds::start(&host, &tables);
    let mut bot = host.login("bot").await;
    let mut alice = host.login("alice").await;
    let sub = testkit::xml(
        "<iq type='set' to='feeds.localhost'><pubsub xmlns='http://jabber.org/protocol/pubsub'>\
         <subscribe node='news' jid='alice@localhost'/></pubsub></iq>",
    );
    assert_eq!(stanza_type(&alice.iq(sub).await), "result");
    for i in 0..5 {
        let r = bot.iq(publish_iq("news", Some(&format!("i{i}")), &entry("urn:x", "t", None, &[]))).await;
        assert_eq!(stanza_type(&r), "result");
    }
    for _ in 0..5 {
        assert!(alice.next_message(std::time::Duration::from_secs(5)).await.is_some(), "push");
    }
    let _ = pull(&mut alice, &Pull::node("news").max(2)).await;
    let r = alice.iq(publish_iq("news", None, &entry("urn:y", "t", None, &[]))).await;
    assert_eq!(stanza_type(&r), "error");

    let text = scrape(port);
    assert!(text.starts_with("HTTP/1.0 200 OK"), "{text}");
    for line in [
        "smartfeeds_requests_total{kind=\"publish\",outcome=\"ok\"} 5",
        "smartfeeds_requests_total{kind=\"publish\",outcome=\"forbidden\"} 1",
        "smartfeeds_requests_total{kind=\"items\",outcome=\"ok\"} 1",
        "smartfeeds_requests_total{kind=\"subscribe\",outcome=\"ok\"} 1",
        "smartfeeds_pushes_sent_total 5",
        "smartfeeds_connected 1",
        "smartfeeds_connects_total 1",
        "smartfeeds_queue_depth{queue=\"replies\"} 0",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}\n{}", sf.log_tail(10));
    }
    assert!(text.contains("smartfeeds_request_seconds_bucket{le="), "{text}");
    let commits = text.lines().find_map(|l| l.strip_prefix("smartfeeds_store_batch_size_count ")).unwrap_or("0");
    assert!(commits.parse::<u64>().unwrap() >= 5, "5 publishes and a subscribe were committed:\n{text}");
    assert!(scrape(port).contains("smartfeeds_requests_total"), "scrapes repeat");
}
