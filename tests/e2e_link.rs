//! The component link against a real XMPP server (Prosody or ejabberd, see
//! `crates/testkit/src/server/select.rs`): it comes back by itself after the server
//! restarts or is killed, serves again within seconds, loses no committed item, and backs
//! off instead of flooding the log while the server is down.

use std::time::{Duration, Instant};
use testkit::pubsub::*;
use testkit::smartfeeds::{Smartfeeds, bin};
use testkit::{TestServer, start_selected};
use testkit::{stanza_type, xml};

const TABLES: &str = r#"
[[feeds]]
name = "news"
publishers = ["bot@localhost"]
"#;

/// Logs in and asks the component's disco#info until it answers, for at most `limit`.
async fn served_within(host: &TestServer, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if let Ok(mut alice) = testkit::Client::try_connect(host.c2s_port(), "alice@localhost", "password").await {
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

/// How long smartfeeds may take to serve again once a server that was down for `down` is
/// back. It retries with a backoff doubling from 0.25 s, so its next attempt after the server
/// is back comes at most about `down` later: Prosody restarts in a fraction of a second, so
/// that is the 10 s budget; ejabberd takes 2–5 s to stop and start again (more on a busy
/// machine), and smartfeeds may then be sleeping for as long before its next attempt.
fn back_within(down: Duration) -> Duration {
    Duration::from_secs(10) + down
}

/// Publishes the items `n{i}` for `ids` to `news`, pipelined.
async fn publish_news(host: &TestServer, ids: std::ops::Range<u32>) {
    let mut bot = host.login("bot").await;
    publish_small(&mut bot, "news", &ids.map(|i| format!("n{i}")).collect::<Vec<_>>()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comes_back_after_the_server_restarts_or_dies() {
    let mut host = start_selected();
    let sf = Smartfeeds::start(&host, TABLES);
    publish_news(&host, 0..20).await;

    // A clean restart, then a SIGKILL with the server down for a while.
    let down = Instant::now();
    host.restart();
    let back = served_within(&host, back_within(down.elapsed())).await;
    eprintln!("{}: served again {back:?} after a restart ({:?} down)", host.name(), down.elapsed() - back);
    publish_news(&host, 20..40).await;

    host.kill();
    let down = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    host.restart();
    let back = served_within(&host, back_within(down.elapsed())).await;
    eprintln!("{}: served again {back:?} after a kill and 3 s down ({:?} down)", host.name(), down.elapsed() - back);

    let mut alice = host.login("alice").await;
    let page = pull(&mut alice, &Pull::node("news?order=created").max(100)).await;
    // Pipelined publishes commit in any order; what matters is that each is there once.
    let mut got = page.ids();
    got.sort_by_key(|id| id[1..].parse::<u32>().unwrap());
    let want: Vec<String> = (0..40).map(|i| format!("n{i}")).collect();
    assert_eq!(got, want, "every committed item is there, once");
    assert_eq!(page.count, Some(40));

    // While the server was down, attempts backed off: a handful of lines, not a flood
    // (doubling from 0.25 s: 5 attempts in 3 s of Prosody being down, 6 or 7 in the 5–10 s
    // ejabberd is down for a kill, 3 s and a cold start; a flood would be hundreds).
    let log = std::fs::read_to_string(sf.log_path()).unwrap();
    let attempts = log.matches("cannot connect to the server").count();
    assert!((1..=12).contains(&attempts), "{attempts} connection attempts logged:\n{}", sf.log_tail(30));
    assert!(log.matches("lost the server connection").count() >= 2, "{}", sf.log_tail(30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_on_the_same_database_is_refused() {
    let host = start_selected();
    let sf = Smartfeeds::start(&host, TABLES);
    let out = std::process::Command::new(bin()).arg("--config").arg(sf.config_path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("another smartfeeds process is using"), "{stderr}");
    // The first one is unaffected.
    served_within(&host, Duration::from_secs(5)).await;
}
