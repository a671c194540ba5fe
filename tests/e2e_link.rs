//! The component link against a real Prosody: it comes back by itself after the server
//! restarts or is killed, serves again within seconds, loses no committed item, and backs
//! off instead of flooding the log while the server is down.

mod common;

use common::Prosody;
use common::pubsub::*;
use common::smartfeeds::Smartfeeds;
use common::{stanza_type, xml};
use std::time::{Duration, Instant};

const TABLES: &str = r#"
[[feeds]]
name = "news"
publishers = ["bot@localhost"]
"#;

/// Logs in and asks the component's disco#info until it answers, for at most `limit`.
async fn served_within(prosody: &Prosody, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if let Ok(mut alice) = common::Client::try_connect(prosody.c2s_port(), "alice@localhost", "password").await {
            let q =
                xml("<iq type='get' to='feeds.localhost'><query xmlns='http://jabber.org/protocol/disco#info'/></iq>");
            let reply = alice.try_iq(q, Duration::from_secs(2)).await;
            if reply.as_ref().is_ok_and(|r| stanza_type(r) == "result") {
                return started.elapsed();
            }
        }
        assert!(started.elapsed() < limit, "not served again within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn publish(prosody: &Prosody, ids: std::ops::Range<u32>) {
    let mut bot = prosody.login("bot").await;
    let iqs =
        ids.map(|i| publish_iq("news", Some(&format!("n{i}")), &entry(&format!("urn:n{i}"), "t", None, &[]))).collect();
    for reply in iq_all(&mut bot, iqs).await {
        assert_eq!(stanza_type(&reply), "result", "{}", common::to_xml(&reply));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comes_back_after_the_server_restarts_or_dies() {
    let mut prosody = Prosody::start();
    let sf = Smartfeeds::start(&prosody, TABLES);
    publish(&prosody, 0..20).await;

    // A clean restart, then a SIGKILL with the server down for a while.
    prosody.restart();
    let back = served_within(&prosody, Duration::from_secs(10)).await;
    eprintln!("served again {back:?} after a restart");
    publish(&prosody, 20..40).await;

    prosody.kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    prosody.restart();
    let back = served_within(&prosody, Duration::from_secs(10)).await;
    eprintln!("served again {back:?} after a kill and 3 s down");

    let mut alice = prosody.login("alice").await;
    let page = pull(&mut alice, &Pull::node("news?order=created").max(100)).await;
    // Pipelined publishes commit in any order; what matters is that each is there once.
    let mut got = page.ids();
    got.sort_by_key(|id| id[1..].parse::<u32>().unwrap());
    let want: Vec<String> = (0..40).map(|i| format!("n{i}")).collect();
    assert_eq!(got, want, "every committed item is there, once");
    assert_eq!(page.count, Some(40));

    // While the server was down, attempts backed off: a handful of lines, not a flood.
    let log = std::fs::read_to_string(sf.log_path()).unwrap();
    let attempts = log.matches("cannot connect to the server").count();
    assert!((1..=12).contains(&attempts), "{attempts} connection attempts logged in about 3 s:\n{}", sf.log_tail(30));
    assert!(log.matches("lost the server connection").count() >= 2, "{}", sf.log_tail(30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_on_the_same_database_is_refused() {
    let prosody = Prosody::start();
    let sf = Smartfeeds::start(&prosody, TABLES);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_smartfeeds"))
        .arg("--config")
        .arg(sf.config_path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("another smartfeeds process is using"), "{stderr}");
    // The first one is unaffected.
    served_within(&prosody, Duration::from_secs(5)).await;
}
