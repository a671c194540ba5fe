//! `[hub]`: the WebSub hub's settings (SPEC §10). The hub runs whenever `[http]` does; this
//! table only changes how. Times are seconds.

use crate::hub::document::Method;
use serde::Deserialize;

/// The WebSub hub: leases, retries, bounds and callback safety.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HubConfig {
    /// The lease a subscription gets when it asks for none.
    pub default_lease: u64,
    /// Asked leases are clamped to `min_lease ..= max_lease`.
    pub min_lease: u64,
    pub max_lease: u64,
    /// The first retry of a failed delivery comes after this; each next one after twice as long.
    pub retry_initial: f64,
    /// The longest wait between two attempts (a callback's `Retry-After` included).
    pub retry_max: f64,
    /// Attempts at one document before it is dropped and delivery moves on.
    pub max_attempts: u32,
    /// Whether callbacks may resolve to loopback, private, link-local or multicast addresses.
    pub allow_private_callbacks: bool,
    /// Changes kept per view for subscribers that are behind; older ones are dropped (the
    /// subscriber sees the gap through `fo:prev_cursor`).
    pub max_backlog: u64,
    /// Deliveries and verifications in flight at once, over all callbacks.
    pub max_concurrent: usize,
    /// Of those, at most this many to one callback host.
    pub max_per_host: usize,
    /// How long one delivery or verification may take, connecting included.
    pub timeout: f64,
    /// Changes that may travel together in one document.
    pub max_batch: usize,
    /// The hash of `X-Hub-Signature` (WebSub §7.1: `sha1`, `sha256`, `sha384`, `sha512`).
    /// A WebSub subscriber cannot say which it checks (§7.1.1 leaves that to a future
    /// extension), so the hub's owner chooses for the subscribers they serve: `sha1` for the
    /// older ones that check only it (Prosody's `mod_pubsub_feeds`), despite its weakness.
    pub signature: Method,
}

impl Default for HubConfig {
    fn default() -> Self {
        HubConfig {
            default_lease: 864_000,
            min_lease: 3600,
            max_lease: 2_592_000,
            retry_initial: 2.0,
            retry_max: 600.0,
            max_attempts: 10,
            allow_private_callbacks: false,
            max_backlog: 10_000,
            max_concurrent: 256,
            max_per_host: 32,
            timeout: 10.0,
            max_batch: 100,
            signature: Method::Sha256,
        }
    }
}

impl HubConfig {
    /// Checks the bounds; the error names the field, for the configuration's message.
    pub fn validate(&self) -> Result<(), String> {
        let bad = |msg: &str| Err(format!("hub: {msg}"));
        if self.min_lease == 0 || self.min_lease > self.max_lease {
            return bad("need 0 < min_lease <= max_lease");
        }
        if self.default_lease < self.min_lease || self.default_lease > self.max_lease {
            return bad("default_lease must be within min_lease ..= max_lease");
        }
        if self.max_lease > 10 * 365 * 86_400 {
            return bad("max_lease is longer than ten years");
        }
        let positive = |x: f64| x.is_finite() && x > 0.0;
        if !positive(self.retry_initial) || !positive(self.retry_max) || self.retry_initial > self.retry_max {
            return bad("need 0 < retry_initial <= retry_max");
        }
        if self.retry_max > 86_400.0 {
            return bad("retry_max is longer than a day");
        }
        if !positive(self.timeout) || self.timeout > 300.0 {
            return bad("timeout must be above 0 and at most 300 seconds");
        }
        if self.max_attempts == 0 || self.max_backlog == 0 || self.max_batch == 0 {
            return bad("max_attempts, max_backlog and max_batch must be positive");
        }
        if self.max_concurrent == 0 || self.max_per_host == 0 || self.max_per_host > self.max_concurrent {
            return bad("need 0 < max_per_host <= max_concurrent");
        }
        Ok(())
    }
}
