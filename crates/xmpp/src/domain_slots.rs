//! At most `per_domain` requests of one sender domain served at once.
//!
//! A server can send from as many JIDs of its domain as it likes, and every one of them gets
//! a rate bucket of its own (the core's admission); so beside the per-JID buckets, this
//! bounds how many requests of one domain are served at once. The rest of that domain's
//! requests wait for one of its slots, and the other domains still find free ones. Only the
//! XMPP face has sender domains, so only it holds these slots.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Domain slots kept before idle ones are forgotten.
const KEEP: usize = 10_000;

/// At most `per_domain` requests of one sender domain served at once .
pub struct DomainSlots {
    per_domain: usize,
    domains: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl DomainSlots {
    pub fn new(per_domain: usize) -> DomainSlots {
        DomainSlots { per_domain, domains: Mutex::new(HashMap::new()) }
    }

    /// Waits for one of `domain`'s slots; it is given back when the permit is dropped.
    pub async fn acquire(&self, domain: &str) -> OwnedSemaphorePermit {
        let semaphore = {
            let mut domains = self.domains.lock().unwrap_or_else(|p| p.into_inner());
            if domains.len() > KEEP {
                let all = self.per_domain;
                domains.retain(|_, s| s.available_permits() < all);
            }
            domains.entry(domain.to_string()).or_insert_with(|| Arc::new(Semaphore::new(self.per_domain))).clone()
        };
        semaphore.acquire_owned().await.expect("domain semaphores are never closed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn one_domain_holds_at_most_its_slots_and_others_are_not_held_up() {
        let slots = DomainSlots::new(2);
        let a1 = slots.acquire("remote.test").await;
        let _a2 = slots.acquire("remote.test").await;
        let third = tokio::time::timeout(Duration::from_millis(50), slots.acquire("remote.test")).await;
        assert!(third.is_err(), "a third request of the same domain waits");
        let other = tokio::time::timeout(Duration::from_millis(50), slots.acquire("example.com")).await;
        assert!(other.is_ok(), "another domain is served at once");
        drop(a1);
        let freed = tokio::time::timeout(Duration::from_millis(50), slots.acquire("remote.test")).await;
        assert!(freed.is_ok(), "a slot given back is taken by the next request");
    }
}
