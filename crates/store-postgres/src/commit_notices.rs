//! Commits announced to every instance on the database: with each write transaction that
//! changed feeds, the writer sends one `NOTIFY smartfeeds_changes` naming them (delivered by
//! PostgreSQL only if the transaction commits). Instances listen so that what waits on a
//! feed (HTTP long-polls and event streams, the push relay) wakes whichever instance wrote.
//!
//! The payload is JSON: `{"i": INSTANCE, "f": [FEED, …]}`, where `INSTANCE` is the writing
//! process's random id, so an instance can skip its own commits (its own change sink has
//! seen them already). A payload over PostgreSQL's limit names no feeds (`"f": null`):
//! everything wakes.

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
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Wire {
    i: u64,
    f: Option<Vec<String>>,
}

/// The payload announcing that `instance` changed `feeds`.
pub(crate) fn payload<'a>(instance: u64, feeds: impl IntoIterator<Item = &'a str>) -> String {
    let feeds: BTreeSet<&str> = feeds.into_iter().collect();
    let named = serde_json::json!({ "i": instance, "f": feeds }).to_string();
    if named.len() <= MAX_PAYLOAD {
        return named;
    }
    serde_json::json!({ "i": instance, "f": null }).to_string()
}

/// Reads a payload; `None` for one that is not ours.
pub fn parse(payload: &str) -> Option<Notice> {
    let w: Wire = serde_json::from_str(payload).ok()?;
    Some(Notice { instance: w.i, feeds: w.f })
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
                        on_notice(Notice { instance: 0, feeds: None });
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
        let p = payload(7, ["b", "a", "b", "x\"y\n"]);
        assert_eq!(parse(&p), Some(Notice { instance: 7, feeds: Some(vec!["a".into(), "b".into(), "x\"y\n".into()]) }));
        let many: Vec<String> = (0..2000).map(|i| format!("feed-{i}")).collect();
        let p = payload(8, many.iter().map(String::as_str));
        assert!(p.len() <= MAX_PAYLOAD);
        assert_eq!(parse(&p), Some(Notice { instance: 8, feeds: None }));
        assert_eq!(parse("something else"), None);
    }
}
