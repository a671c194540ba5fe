//! Verification of intent (SPEC §10): before a subscription or unsubscription takes
//! effect, the hub asks the callback whether it wants it, with a fresh random challenge the
//! callback must echo. Only a 2xx whose body is exactly the challenge counts, so nobody can
//! subscribe a URL that did not ask for it (or unsubscribe one that did).

use super::Hub;
use super::callback::bounded_body;
use feed::ports::Store;
use std::sync::Arc;
use url::Url;

/// Subscribe or unsubscribe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Subscribe,
    Unsubscribe,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Subscribe => "subscribe",
            Mode::Unsubscribe => "unsubscribe",
        }
    }
}

/// A checked (un)subscription request, waiting for its verification.
#[derive(Clone, Debug)]
pub struct Intent {
    pub mode: Mode,
    /// Who asked (a bare JID, or empty when anonymous): asked again at verification.
    pub actor: String,
    pub feed: String,
    /// The canonical view.
    pub view: String,
    /// The topic as the subscriber gave it.
    pub topic: String,
    pub callback: Url,
    /// The lease granted, seconds (clamped already).
    pub lease: u64,
    pub secret: Option<String>,
}

/// A fresh challenge: 256 random bits in hex.
fn challenge() -> String {
    format!("{:032x}{:032x}", rand::random::<u128>(), rand::random::<u128>())
}

/// The verification URL: the callback with the hub's parameters added, its own query kept.
fn verification_url(intent: &Intent, challenge: &str) -> Url {
    let mut url = intent.callback.clone();
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("hub.mode", intent.mode.as_str());
        q.append_pair("hub.topic", &intent.topic);
        q.append_pair("hub.challenge", challenge);
        if intent.mode == Mode::Subscribe {
            q.append_pair("hub.lease_seconds", &intent.lease.to_string());
        }
    }
    url
}

/// Asks the callback, then applies the intent if it agreed.
pub(super) async fn verify<S: Store>(hub: Arc<Hub<S>>, intent: Intent) {
    let challenge = challenge();
    let url = verification_url(&intent, &challenge);
    // Only the host is logged: a callback's path or query may hold the subscriber's tokens.
    let host = intent.callback.host_str().unwrap_or_default().to_string();
    let agreed = match hub.slots(&host).await {
        None => false,
        Some(_permits) => match hub.client.get(url.as_str()) {
            Err(refused) => {
                tracing::debug!(%host, %refused, "verification refused");
                false
            }
            Ok(req) => match req.send().await {
                Ok(res) if res.status().is_success() => bounded_body(res).await == challenge.as_bytes(),
                Ok(res) => {
                    tracing::debug!(%host, status = %res.status(), "verification refused");
                    false
                }
                Err(e) => {
                    tracing::debug!(%host, error = %e.without_url(), "verification failed");
                    false
                }
            },
        },
    };
    if !agreed {
        hub.metrics.hub.verification("refused");
        tracing::info!(%host, mode = intent.mode.as_str(), view = %intent.view, "WebSub intent not verified");
        return;
    }
    hub.metrics.hub.verification("accepted");
    let (mode, view) = (intent.mode, intent.view.clone());
    let applied = match mode {
        Mode::Subscribe => hub.subscribed(intent).await,
        Mode::Unsubscribe => hub
            .unsubscribed(Some(&intent.actor), (&intent.feed, &intent.view, intent.callback.as_str()))
            .await
            .map(|_| ()),
    };
    match applied {
        Ok(()) => tracing::info!(%host, mode = mode.as_str(), %view, "WebSub intent verified"),
        Err(e) => {
            tracing::warn!(%host, mode = mode.as_str(), %view, error = %e, "cannot apply a verified WebSub intent")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_callback_keeps_its_query_and_gets_the_hub_parameters() {
        let intent = Intent {
            mode: Mode::Subscribe,
            actor: String::new(),
            feed: "f".into(),
            view: "f?order=modified".into(),
            topic: "http://h/feeds/f/?order=modified".into(),
            callback: Url::parse("http://cb.example/in?token=abc").unwrap(),
            lease: 3600,
            secret: None,
        };
        let url = verification_url(&intent, "xyz");
        let q: Vec<(String, String)> = url.query_pairs().map(|(k, v)| (k.into(), v.into())).collect();
        assert_eq!(q[0], ("token".into(), "abc".into()));
        assert!(q.contains(&("hub.topic".into(), "http://h/feeds/f/?order=modified".into())));
        assert!(q.contains(&("hub.challenge".into(), "xyz".into())));
        assert!(q.contains(&("hub.lease_seconds".into(), "3600".into())));
        let un = verification_url(&Intent { mode: Mode::Unsubscribe, ..intent }, "xyz");
        assert!(!un.as_str().contains("lease_seconds") && un.as_str().contains("hub.mode=unsubscribe"));
        assert_ne!(challenge(), challenge());
    }
}
