//! Subscriptions to the WebSub hubs of sources (SPEC §13): when a fetched document names a
//! hub (`Link: <…>; rel="hub"` or `<link rel="hub">`) and the HTTP face has a public
//! prefix, smartfeeds subscribes to the hub with a callback `BASE/sources/KEY` and a fresh
//! secret, answers the hub's verification of intent, subscribes again before the lease ends,
//! and hands each delivery whose signature checks to the source's task as a fetched
//! document. Polling goes on at the interval: a hub that goes quiet loses nothing.
//!
//! Renewal: a verified subscription is renewed when three quarters of its lease have passed
//! (at most an hour before it ends, for long leases), by the source's task on a timer of its
//! own ([`Subscriber::renew_at`]), not only at its fetches. Never sooner than
//! [`MIN_RENEWAL`] after the verification: a hub granting a shorter lease than that is not
//! asked again and again; its subscription lapses between renewals, and polling covers the
//! gap (logged when the lease is granted).
//!
//! A new subscription gets a new key and secret; once the hub verifies it, the feed's older
//! ones are forgotten (their deliveries then find no key and are ignored).
//!
//! Several instances on PostgreSQL: only the instance that fetches a source (the one
//! holding its feed's push shard) subscribes at its hub; one that served a ping does not.
//! An instance that stops fetching it (the shard moved) unsubscribes ([`Subscriber::leave`])
//! and the new one subscribes after its first fetch. An instance that dies cannot
//! unsubscribe: its subscription lasts until its lease ends, and the hub's deliveries to it
//! fail meanwhile (the survivor's own subscription carries the updates).

use hmac::{Hmac, Mac};
use sha2::{Sha256, Sha384, Sha512};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// The lease asked for: ten days, as WebSub hubs grant by default.
const LEASE: u64 = 864_000;
/// How long an unanswered subscription request blocks asking again.
const PENDING: Duration = Duration::from_secs(60);
/// The soonest a subscription is renewed after it was verified, however short its lease.
pub const MIN_RENEWAL: Duration = Duration::from_secs(10);
/// The most before the end of a lease that it is renewed.
const RENEWAL_MARGIN: Duration = Duration::from_secs(3600);

/// One subscription to a source's hub.
struct Sub {
    feed: String,
    hub: String,
    topic: String,
    secret: String,
    /// When asked; when verified, until when the lease runs and when to renew it.
    asked: Instant,
    until: Option<Instant>,
    renew: Option<Instant>,
    /// Being unsubscribed: the hub's verification of that is agreed to, deliveries ignored.
    leaving: bool,
    deliveries: mpsc::Sender<Vec<u8>>,
}

/// Every subscription of this process to its sources' hubs, by callback key.
pub struct Subscriber {
    /// `BASE`, without a trailing `/`.
    base: String,
    client: outbound::Client,
    max_bytes: usize,
    /// A std mutex: held only to read or change the map, never across an await.
    subs: Mutex<HashMap<String, Sub>>,
    /// Counts verifications: the sources' tasks wait on it to set their renewal timers.
    verifications: watch::Sender<u64>,
}

impl Subscriber {
    pub fn new(base: &str, client: outbound::Client, max_bytes: usize) -> Subscriber {
        Subscriber {
            base: base.trim_end_matches('/').to_string(),
            client,
            max_bytes,
            subs: Mutex::default(),
            verifications: watch::Sender::new(0),
        }
    }

    /// Changes with each verification of a subscription (of any feed): when a renewal time
    /// may have been set.
    pub fn verifications(&self) -> watch::Receiver<u64> {
        self.verifications.subscribe()
    }

    /// Makes sure `feed` is subscribed to `topic` at `hub`: asks when it is not, when the hub
    /// or topic changed, or when its renewal time ([`renew_at`](Self::renew_at)) has come.
    /// Deliveries go to `deliveries`.
    pub async fn ensure(&self, feed: &str, hub: &str, topic: &str, deliveries: &mpsc::Sender<Vec<u8>>) {
        let now = Instant::now();
        let key = random_hex();
        let secret = random_hex();
        {
            let Ok(mut subs) = self.subs.lock() else { return };
            // Unsubscriptions the hub never verified are not waited for any longer.
            subs.retain(|_, s| !(s.leaving && now.duration_since(s.asked) >= PENDING));
            let current = subs.values().any(|s| {
                !s.leaving
                    && s.feed == feed
                    && s.hub == hub
                    && s.topic == topic
                    && match s.renew {
                        Some(renew) => renew > now,
                        None => now.duration_since(s.asked) < PENDING,
                    }
            });
            if current {
                return;
            }
            subs.insert(
                key.clone(),
                Sub {
                    feed: feed.to_string(),
                    hub: hub.to_string(),
                    topic: topic.to_string(),
                    secret: secret.clone(),
                    asked: now,
                    until: None,
                    renew: None,
                    leaving: false,
                    deliveries: deliveries.clone(),
                },
            );
        }
        let callback = format!("{}/sources/{key}", self.base);
        let lease = LEASE.to_string();
        let form = [
            ("hub.mode", "subscribe"),
            ("hub.topic", topic),
            ("hub.callback", callback.as_str()),
            ("hub.secret", secret.as_str()),
            ("hub.lease_seconds", lease.as_str()),
        ];
        let answer = match self.client.post(hub) {
            Ok(req) => req.form(&form).send().await.map(|r| r.status()).map_err(|e| e.to_string()),
            Err(refused) => Err(format!("the hub URL {refused}")),
        };
        match answer {
            Ok(status) if status.is_success() => {
                tracing::info!(feed, hub, topic, "asked the source's hub for a subscription");
            }
            other => {
                let why = match other {
                    Ok(status) => format!("answered {status}"),
                    Err(e) => e,
                };
                tracing::warn!(feed, hub, error = %why, "the source's hub refused a subscription; polling only");
                if let Ok(mut subs) = self.subs.lock() {
                    // Kept as pending: not asked again before PENDING passes.
                    if let Some(s) = subs.get_mut(&key) {
                        s.asked = now;
                    }
                }
            }
        }
    }

    /// The hub verifies intent for `key`: true (and the subscription in force for `lease`
    /// seconds) when it is one we asked for, with its topic.
    pub fn verify(&self, key: &str, mode: &str, topic: &str, lease: Option<u64>) -> bool {
        let Ok(mut subs) = self.subs.lock() else { return false };
        let Some(sub) = subs.get_mut(key) else { return false };
        if sub.topic != topic {
            return false;
        }
        if sub.leaving || mode != "subscribe" {
            let agreed = sub.leaving && mode == "unsubscribe";
            if agreed {
                tracing::info!(feed = %sub.feed, topic, "unsubscribed from the source's hub");
                subs.remove(key);
            }
            return agreed;
        }
        let lease = Duration::from_secs(lease.unwrap_or(LEASE).min(LEASE * 10));
        let now = Instant::now();
        sub.until = Some(now + lease);
        sub.renew = Some(now + renewal_after(lease));
        let feed = sub.feed.clone();
        tracing::info!(feed = %feed, topic, lease = lease.as_secs(), "subscribed to the source's hub");
        if lease < MIN_RENEWAL {
            tracing::warn!(
                feed = %feed,
                topic,
                lease = lease.as_secs(),
                "the source's hub granted a lease shorter than the soonest renewal ({} s); it lapses between renewals, polling covers the gaps",
                MIN_RENEWAL.as_secs()
            );
        }
        // Older subscriptions of the feed are replaced by this one.
        subs.retain(|k, s| k == key || s.feed != feed);
        drop(subs);
        self.verifications.send_modify(|n| *n = n.wrapping_add(1));
        true
    }

    /// When `feed`'s subscription is to be renewed: its lease's renewal time, or, while a
    /// renewal is waiting for the hub's verification, when that wait is over. `None` when it
    /// holds no lease in force and none waits for its renewal (a hub that never verifies is
    /// asked again at fetches only).
    pub fn renew_at(&self, feed: &str) -> Option<Instant> {
        let now = Instant::now();
        let subs = self.subs.lock().ok()?;
        let mine = || subs.values().filter(|s| s.feed == feed && !s.leaving);
        // A lease in force, or one that lapsed before its renewal (shorter than MIN_RENEWAL)
        // whose renewal is due and not yet asked for: a wait that something else ended just
        // as it came must not lose it.
        let held = |s: &&Sub| s.until.is_some_and(|u| u > now) || s.renew.is_some_and(|r| r + PENDING > now);
        let renew = mine().filter(held).filter_map(|s| s.renew).min()?;
        let pending = mine().filter(|s| s.until.is_none()).map(|s| s.asked + PENDING).max();
        Some(pending.map_or(renew, |p| p.max(renew)))
    }

    /// Unsubscribes `feed` from its hub: each of its subscriptions is asked to end
    /// (`hub.mode=unsubscribe`) and takes no more deliveries; the hub's verification of the
    /// unsubscription is agreed to. What the instance does when it stops fetching the source.
    pub async fn leave(&self, feed: &str) {
        let now = Instant::now();
        let leaving: Vec<(String, String, String)> = {
            let Ok(mut subs) = self.subs.lock() else { return };
            subs.iter_mut()
                .filter(|(_, s)| s.feed == feed && !s.leaving)
                .map(|(key, s)| {
                    s.leaving = true;
                    s.asked = now;
                    (key.clone(), s.hub.clone(), s.topic.clone())
                })
                .collect()
        };
        for (key, hub, topic) in leaving {
            let callback = format!("{}/sources/{key}", self.base);
            let form =
                [("hub.mode", "unsubscribe"), ("hub.topic", topic.as_str()), ("hub.callback", callback.as_str())];
            let answer = match self.client.post(&hub) {
                Ok(req) => req.form(&form).send().await.map(|r| r.status()).map_err(|e| e.to_string()),
                Err(refused) => Err(format!("the hub URL {refused}")),
            };
            match answer {
                Ok(status) if status.is_success() => {
                    tracing::info!(
                        feed,
                        hub,
                        topic,
                        "asked the source's hub to end a subscription: another instance fetches it"
                    )
                }
                other => {
                    let why = other.map_or_else(|e| e, |s| format!("answered {s}"));
                    tracing::warn!(feed, hub, error = %why, "the source's hub did not take an unsubscription; its lease runs out");
                }
            }
        }
    }

    /// A delivery to `key`: handed to the source's task when its signature checks with the
    /// subscription's secret; ignored otherwise.
    pub fn deliver(&self, key: &str, signature: Option<&str>, body: &[u8]) {
        let Ok(subs) = self.subs.lock() else { return };
        let Some(sub) = subs.get(key).filter(|s| !s.leaving) else { return };
        if !signature.is_some_and(|s| signed(&sub.secret, s, body)) {
            tracing::warn!(feed = %sub.feed, "a delivery from the source's hub without a good signature; ignored");
            return;
        }
        // Full: the task is busy with earlier documents; the next poll catches up.
        let _ = sub.deliveries.try_send(body.to_vec());
    }

    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }
}

/// How long after its verification a lease of `lease` is renewed: when three quarters of it
/// have passed, or an hour before its end if that is later, never sooner than
/// [`MIN_RENEWAL`].
pub fn renewal_after(lease: Duration) -> Duration {
    let margin = (lease / 4).min(RENEWAL_MARGIN);
    (lease - margin).max(MIN_RENEWAL)
}

/// 128 random bits in hex.
fn random_hex() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Whether `header` (`X-Hub-Signature: METHOD=HEX`) is the HMAC of `body` under `secret`,
/// with SHA-256, -384 or -512 (compared in constant time by the MAC).
pub fn signed(secret: &str, header: &str, body: &[u8]) -> bool {
    let Some((method, hex)) = header.trim().split_once('=') else { return false };
    let Some(expected) = from_hex(hex) else { return false };
    fn check<M: Mac + hmac::digest::KeyInit>(secret: &str, body: &[u8], expected: &[u8]) -> bool {
        let Ok(mut mac) = <M as hmac::digest::KeyInit>::new_from_slice(secret.as_bytes()) else { return false };
        mac.update(body);
        mac.verify_slice(expected).is_ok()
    }
    match method.to_ascii_lowercase().as_str() {
        "sha256" => check::<Hmac<Sha256>>(secret, body, &expected),
        "sha384" => check::<Hmac<Sha384>>(secret, body, &expected),
        "sha512" => check::<Hmac<Sha512>>(secret, body, &expected),
        _ => false,
    }
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_renewed_at_three_quarters_at_most_an_hour_before_their_end_never_within_ten_seconds() {
        let s = Duration::from_secs;
        assert_eq!(renewal_after(s(LEASE)), s(LEASE - 3600));
        assert_eq!(renewal_after(s(4000)), s(3000));
        assert_eq!(renewal_after(s(20)), s(15));
        assert_eq!(renewal_after(s(12)), MIN_RENEWAL);
        assert_eq!(renewal_after(s(2)), MIN_RENEWAL);
        assert_eq!(renewal_after(s(0)), MIN_RENEWAL);
    }

    #[tokio::test]
    async fn a_lapsed_lease_whose_renewal_is_due_keeps_its_renewal_time() {
        let guard = outbound::Guard::new(&outbound::OutboundConfig::default(), true).unwrap();
        let client = outbound::Client::new(guard, Duration::from_secs(1), 1, "test").unwrap();
        let subscriber = Subscriber::new("http://127.0.0.1:1", client, 1024);
        let (tx, _rx) = mpsc::channel(1);
        let now = Instant::now();
        let ago = |d: u64| now.checked_sub(Duration::from_millis(d)).unwrap();
        let sub = |feed: &str, until: Instant, renew: Instant| Sub {
            feed: feed.into(),
            hub: "http://hub/".into(),
            topic: "http://topic/".into(),
            secret: "s".into(),
            asked: ago(20_000),
            until: Some(until),
            renew: Some(renew),
            leaving: false,
            deliveries: tx.clone(),
        };
        {
            let mut subs = subscriber.subs.lock().unwrap();
            // A 2-second lease verified 10 s ago: lapsed, its renewal just due.
            subs.insert("a".into(), sub("due", ago(8_000), ago(5)));
            // Lapsed long ago, its renewal time long past: nothing to renew any more.
            subs.insert("b".into(), sub("gone", ago(200_000), ago(190_000)));
            // In force.
            subs.insert("c".into(), sub("held", now + Duration::from_secs(60), now + Duration::from_secs(30)));
        }
        assert_eq!(subscriber.renew_at("due"), Some(ago(5)), "still due: a wait that missed it fires at once");
        assert_eq!(subscriber.renew_at("gone"), None);
        assert_eq!(subscriber.renew_at("held"), Some(now + Duration::from_secs(30)));
        assert_eq!(subscriber.renew_at("other"), None);
    }

    #[test]
    fn signatures_are_checked_with_the_secret() {
        let mut mac = Hmac::<Sha256>::new_from_slice(b"s3cret").unwrap();
        mac.update(b"body");
        let hex: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
        assert!(signed("s3cret", &format!("sha256={hex}"), b"body"));
        assert!(!signed("other", &format!("sha256={hex}"), b"body"));
        assert!(!signed("s3cret", &format!("sha256={hex}"), b"body2"));
        assert!(!signed("s3cret", &format!("sha1={hex}"), b"body"));
        assert!(!signed("s3cret", "sha256=zz", b"body"));
        assert!(!signed("s3cret", "garbage", b"body"));
        assert!(!signed("s3cret", "sha256=é", b"body"));
    }
}
