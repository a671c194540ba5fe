//! One subscription's deliveries (SPEC §10): the outbox rows after its progress, up to
//! `max_batch` in one document, POSTed one document at a time in commit order. A connection
//! error, timeout, 429 or 5xx is tried again after `retry_initial`, doubling up to
//! `retry_max` (or the callback's `Retry-After`, capped the same way), until `max_attempts`,
//! when the document is dropped and delivery moves on; `410 Gone` ends the subscription;
//! any other 3xx or 4xx drops the document at once. Documents that changes committed
//! meanwhile would follow are read afresh after each one, so they travel together.

use super::callback::MAX_ANSWER;
use super::{Hub, Worker, document, now_ms, stopping};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use bytes::Bytes;
use feed::outbox::HubSubscription;
use feed::ports::Store;
use std::sync::Arc;
use std::time::Duration;

/// How long a task waits before reading the outbox again after the store failed.
const STORE_RETRY: Duration = Duration::from_secs(1);

/// How one attempt went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attempt {
    Delivered,
    /// 410: the subscriber is gone for good.
    Gone,
    /// Another 3xx or 4xx: this document will never be taken.
    Rejected,
    /// Worth trying again, after the callback's `Retry-After` if it gave one.
    Retry(Option<Duration>),
}

/// How a document's delivery ended.
enum Ended {
    /// Delivery moves on to the next rows; the outcome is counted under this name.
    Done(&'static str),
    Gone,
    /// The subscription ended or the hub is stopping.
    Stopped,
}

/// Runs a subscription's deliveries until it ends or the hub stops.
pub(super) async fn run<S: Store>(hub: Arc<Hub<S>>, w: Arc<Worker>) {
    let mut stop = hub.stop.clone();
    let mut delivered = w.snapshot().delivered;
    // Whether progress must be read from the store first (after this instance got the feed).
    let mut refresh = false;
    let mut target: Option<Target> = None;
    loop {
        if w.is_gone() || *stop.borrow() {
            return;
        }
        if !hub.owns(w.snapshot().feed) {
            // Another instance delivers this feed; once it is ours, resume from the progress
            // the store has (the other instance's, or ours if it is further).
            if !hub.await_share(w.snapshot().feed, &w).await {
                return;
            }
            refresh = true;
        }
        if refresh {
            let (feed, id) = (w.snapshot().feed, w.snapshot().id);
            match hub.stored(feed, id).await {
                Ok(Some(stored)) => {
                    delivered = delivered.max(stored.delivered);
                    refresh = false;
                }
                Ok(None) => {
                    hub.registry.remove(|s| s.id == id);
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, subscription = id, "cannot read a subscription");
                    tokio::time::sleep(STORE_RETRY).await;
                    continue;
                }
            }
        }
        let sub = w.snapshot();
        // Made again only when the subscription was renewed (a new Arc).
        if !target.as_ref().is_some_and(|t| Arc::ptr_eq(&t.sub, &sub)) {
            target = None;
        }
        let current = target.get_or_insert_with(|| Target::of(sub.clone(), &hub.url, &hub.client));
        let left = sub.expires.saturating_sub(now_ms());
        if left <= 0 {
            // An expired subscription gets nothing; housekeeping removes it from the store.
            hub.registry.remove(|s| s.id == sub.id);
            return;
        }
        let (feed, view, batch) = (sub.feed, sub.view.clone(), hub.config.max_batch);
        let key = (w.feed.clone(), sub.view.clone());
        let generation = hub.registry.generations.get(&key);
        let svc = hub.svc.clone();
        let read =
            || async move { svc.outbox(feed, view, delivered, batch).await.map(|e| Arc::new(document::Batch::new(e))) };
        let read = hub.reads.get((key, delivered), generation, read).await;
        let batch = match read {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, subscription = sub.id, "cannot read the outbox");
                tokio::time::sleep(STORE_RETRY).await;
                continue;
            }
        };
        let Some(upto) = batch.entries.last().map(|e| e.seq) else {
            tokio::select! {
                _ = w.wake.notified() => {}
                // Shards moved: whether this feed is still ours is asked again.
                _ = hub.share_changed() => {}
                _ = stopping(&mut stop) => return,
                _ = tokio::time::sleep(Duration::from_millis(left.min(86_400_000) as u64)) => {}
            }
            continue;
        };
        match deliver(&hub, &w, current, &batch).await {
            Ended::Done(outcome) => {
                hub.metrics.hub.delivery(outcome);
                delivered = upto;
                hub.ack(sub.id, upto);
            }
            Ended::Gone => {
                hub.metrics.hub.delivery("gone");
                tracing::info!(subscription = sub.id, "callback answered 410 Gone: subscription ended");
                if let Err(e) = hub.unsubscribed(None, (&w.feed, &sub.view, &sub.callback)).await {
                    tracing::warn!(error = %e, subscription = sub.id, "cannot remove a gone subscription");
                }
                return;
            }
            Ended::Stopped => return,
        }
    }
}

/// Where a subscription's documents go, worked out once per version of the subscription
/// rather than at every delivery: its callback checked and parsed, the callback's host
/// (which the per-host bound counts) and the headers every document carries.
struct Target {
    sub: Arc<HubSubscription>,
    /// Why not, if the callback is refused now (subscribed while private callbacks were
    /// allowed, and they no longer are).
    to: Result<outbound::PostTarget, outbound::Refused>,
    host: String,
    headers: HeaderMap,
}

impl Target {
    fn of(sub: Arc<HubSubscription>, hub: &str, client: &outbound::Client) -> Target {
        let to = client.target(&sub.callback);
        let host = to.as_ref().ok().and_then(|t| t.url().host_str()).unwrap_or_default().to_string();
        let mut headers = HeaderMap::new();
        // The Content-Type of the topic (WebSub §7), its Atom answer's.
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(crate::formats::Format::Atom.content_type()));
        if let Ok(link) = HeaderValue::try_from(format!("<{hub}>; rel=\"hub\", <{}>; rel=\"self\"", sub.topic)) {
            headers.insert(header::LINK, link);
        }
        Target { sub, to, host, headers }
    }
}

/// Delivers one document, retrying as the module docs say.
async fn deliver<S: Store>(hub: &Hub<S>, w: &Worker, target: &Target, batch: &document::Batch) -> Ended {
    let sub = &target.sub;
    let policy = hub.svc.policy().feed(&w.feed);
    let title = policy.title.as_deref().unwrap_or(&w.feed);
    let body = batch.document(&sub.topic, &hub.url, title);
    let signature = sub.secret.as_deref().map(|s| document::signature(hub.config.signature, s, &body));
    let (initial, max) =
        (Duration::from_secs_f64(hub.config.retry_initial), Duration::from_secs_f64(hub.config.retry_max));
    let mut backoff = initial;
    let mut stop = hub.stop.clone();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let outcome = post(hub, target, body.clone(), signature.as_deref()).await;
        let wait = match outcome {
            Attempt::Delivered => return Ended::Done("delivered"),
            Attempt::Gone => return Ended::Gone,
            Attempt::Rejected => return Ended::Done("rejected"),
            Attempt::Retry(_) if attempt >= hub.config.max_attempts => {
                tracing::warn!(subscription = sub.id, attempts = attempt, "WebSub document dropped after its attempts");
                return Ended::Done("dropped");
            }
            Attempt::Retry(after) => after.unwrap_or(backoff).min(max),
        };
        hub.metrics.hub.retries.inc();
        backoff = (backoff * 2).min(max);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = w.ended.notified() => return Ended::Stopped,
            _ = stopping(&mut stop) => return Ended::Stopped,
        }
        if w.is_gone() {
            return Ended::Stopped;
        }
    }
}

/// One POST of a document, within the hub's bounds on requests in flight.
async fn post<S: Store>(hub: &Hub<S>, target: &Target, body: Bytes, signature: Option<&str>) -> Attempt {
    let sub = &target.sub;
    let to = match &target.to {
        Ok(to) => to,
        Err(refused) => {
            tracing::debug!(subscription = sub.id, %refused, "WebSub delivery refused");
            return Attempt::Retry(None);
        }
    };
    let Some(_permits) = hub.slots(&target.host).await else { return Attempt::Retry(None) };
    let mut headers = target.headers.clone();
    if let Some(sig) = signature.and_then(|s| HeaderValue::from_str(s).ok()) {
        headers.insert("x-hub-signature", sig);
    }
    // At most MAX_ANSWER bytes of the answer are read, so the connection can be used again.
    match hub.client.post_bytes(to, headers, body, MAX_ANSWER).await {
        Ok(answer) => classify(answer.status, answer.headers.get(header::RETRY_AFTER)),
        Err(e) => {
            tracing::debug!(subscription = sub.id, error = %e, "WebSub delivery failed");
            Attempt::Retry(None)
        }
    }
}

/// What a callback's status means (SPEC §10).
fn classify(status: StatusCode, retry_after: Option<&HeaderValue>) -> Attempt {
    match status.as_u16() {
        200..=299 => Attempt::Delivered,
        410 => Attempt::Gone,
        429 | 500..=599 => Attempt::Retry(
            retry_after
                .and_then(|v| v.to_str().ok())
                .and_then(|s| s.trim().parse::<u64>().ok())
                .map(Duration::from_secs),
        ),
        _ => Attempt::Rejected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_mean_what_the_spec_says() {
        assert_eq!(classify(StatusCode::OK, None), Attempt::Delivered);
        assert_eq!(classify(StatusCode::NO_CONTENT, None), Attempt::Delivered);
        assert_eq!(classify(StatusCode::GONE, None), Attempt::Gone);
        assert_eq!(classify(StatusCode::INTERNAL_SERVER_ERROR, None), Attempt::Retry(None));
        let after = HeaderValue::from_static("7");
        assert_eq!(classify(StatusCode::TOO_MANY_REQUESTS, Some(&after)), Attempt::Retry(Some(Duration::from_secs(7))));
        let date = HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT");
        assert_eq!(classify(StatusCode::SERVICE_UNAVAILABLE, Some(&date)), Attempt::Retry(None));
        assert_eq!(classify(StatusCode::MOVED_PERMANENTLY, None), Attempt::Rejected);
        assert_eq!(classify(StatusCode::NOT_FOUND, None), Attempt::Rejected);
    }
}
