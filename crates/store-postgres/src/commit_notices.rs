//! Commits announced to every instance on the database: with each write transaction that
//! changed feeds, the writer sends one `NOTIFY smartfeeds_changes` naming them (delivered by
//! PostgreSQL only if the transaction commits). Instances listen so that what waits on a
//! feed (HTTP long-polls and event streams, the push relay) wakes whichever instance wrote.
//!
//! The payload is JSON: `{"i": INSTANCE, "f": [FEED, …], "p": PUSHES}`, where `INSTANCE` is
//! the writing process's random id, so an instance can skip its own commits (its own change
//! sink has seen them already), and `PUSHES` whether the transaction logged changes to push
//! (`push_log`): only those wake the push relays, which otherwise would read the log for
//! nothing after every commit of every instance. A payload without `"p"` (an older
//! instance's) counts as logging some. A payload over PostgreSQL's limit names no feeds
//! (`"f": null`): everything wakes.

use super::parse_url;
use std::collections::BTreeSet;
use std::time::Duration;
use tokio_postgres::{AsyncMessage, NoTls};

/// The channel every commit is announced on.
pub const CHANNEL: &str = "smartfeeds_changes";
/// Under PostgreSQL's 8000-byte payload limit.
const MAX_PAYLOAD: usize = 7900;
/// How long a lost session waits before listening again.
const RETRY: Duration = Duration::from_secs(1);

/// What a notice says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// The instance that committed.
    pub instance: u64,
    /// The feeds it changed; `None`: any (too many to name, or commit_notices may have been lost).
    pub feeds: Option<Vec<String>>,
    /// Whether it logged changes to push.
    pub pushes: bool,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Wire {
    i: u64,
    f: Option<Vec<String>>,
    #[serde(default = "logged")]
    p: bool,
}

fn logged() -> bool {
    true
}

/// The payload announcing that `instance` changed `feeds`, and whether it logged changes
/// to push.
pub(crate) fn payload<'a>(instance: u64, feeds: impl IntoIterator<Item = &'a str>, pushes: bool) -> String {
    let feeds: BTreeSet<&str> = feeds.into_iter().collect();
    let named = serde_json::json!({ "i": instance, "f": feeds, "p": pushes }).to_string();
    if named.len() <= MAX_PAYLOAD {
        return named;
    }
    serde_json::json!({ "i": instance, "f": null, "p": pushes }).to_string()
}

/// Reads a payload; `None` for one that is not ours.
pub fn parse(payload: &str) -> Option<Notice> {
    let w: Wire = serde_json::from_str(payload).ok()?;
    Some(Notice { instance: w.i, feeds: w.f, pushes: w.p })
}

/// Whether a commit announced with `payload` may have left changes for the push relays
/// (any payload not ours may: it costs them a look at the log).
pub fn wakes_relay(payload: &str) -> bool {
    parse(payload).is_none_or(|n| n.pushes)
}

/// Listens on the database at `url` until the process ends, handing each notice to
/// `on_notice`. After a lost session it listens again and hands over a notice naming no
/// feeds: whatever was announced meanwhile is lost, so everything should look again.
pub async fn listen(url: String, mut on_notice: impl FnMut(Notice) + Send + 'static) {
    let config = match parse_url(&url) {
        Ok(c) => c,
        Err(why) => {
            tracing::error!(%why, "cannot listen for commits of other instances");
            return;
        }
    };
    let mut first = true;
    loop {
        match config.connect(NoTls).await {
            Ok((client, mut conn)) => {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let driver = tokio::spawn(async move {
                    while let Some(Ok(msg)) = std::future::poll_fn(|cx| conn.poll_message(cx)).await {
                        if let AsyncMessage::Notification(n) = msg
                            && tx.send(n.payload().to_string()).is_err()
                        {
                            break;
                        }
                    }
                });
                if let Err(e) = client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
                    tracing::warn!(error = %e, "cannot listen for commits of other instances");
                } else {
                    if !first {
                        on_notice(Notice { instance: 0, feeds: None, pushes: true });
                    }
                    first = false;
                    while let Some(p) = rx.recv().await {
                        match parse(&p) {
                            Some(n) => on_notice(n),
                            None => tracing::debug!(payload = %p, "a notice that is not ours"),
                        }
                    }
                    tracing::warn!("lost the session listening for commits of other instances");
                }
                driver.abort();
            }
            Err(e) => tracing::warn!(error = %e, "cannot listen for commits of other instances"),
        }
        tokio::time::sleep(RETRY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_name_each_feed_once_or_none_when_too_long() {
        let p = payload(7, ["b", "a", "b", "x\"y\n"], true);
        let feeds = Some(vec!["a".into(), "b".into(), "x\"y\n".into()]);
        assert_eq!(parse(&p), Some(Notice { instance: 7, feeds, pushes: true }));
        let many: Vec<String> = (0..2000).map(|i| format!("feed-{i}")).collect();
        let p = payload(8, many.iter().map(String::as_str), false);
        assert!(p.len() <= MAX_PAYLOAD);
        assert_eq!(parse(&p), Some(Notice { instance: 8, feeds: None, pushes: false }));
        assert_eq!(parse("something else"), None);
    }

    #[test]
    fn only_commits_that_logged_pushes_wake_the_relays() {
        assert!(wakes_relay(&payload(1, ["a"], true)));
        assert!(!wakes_relay(&payload(1, ["a"], false)));
        // An older instance's notice says nothing of pushes: the relays look.
        assert!(wakes_relay(r#"{"i":1,"f":["a"]}"#));
        assert!(wakes_relay("not ours"));
    }
}
