//! Per-sender fairness: a flood from one JID slows that JID, not the others.
//!
//! Each bare JID has a token bucket (`rate` requests a second, bursts of `burst`). A request
//! that finds the bucket empty *reserves* a future token and waits for it, so a flood is
//! served at the sender's rate and in its order, while other senders' buckets are untouched.
//! A sender that has reserved more than `backlog` tokens ahead is refused at once
//! (`resource-constraint`), which bounds what one sender can make the service hold.
//!
//! One limiter serves every face: the service holds it ([`crate::service::Service::admit`]),
//! so a sender has one rate whether it asks over XMPP or HTTP.

use crate::policy::Limits;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a request may do now.
#[derive(Debug, PartialEq)]
pub enum Admission {
    /// Go ahead after waiting this long (zero when the sender is within its rate).
    After(Duration),
    /// Too far over the rate: refuse.
    Refuse,
    /// Not limited at all (an admin): no rate, and no share of the sender's domain to wait for.
    Unlimited,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets by sender.
pub struct Limiter {
    rate: f64,
    burst: f64,
    backlog: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

/// Buckets kept before idle (full) ones are forgotten.
const KEEP: usize = 10_000;

impl Limiter {
    pub fn new(rate: f64, burst: f64, backlog: f64) -> Limiter {
        Limiter { rate, burst, backlog, buckets: Mutex::new(HashMap::new()) }
    }

    /// The limiter `[limits]` asks for.
    pub fn from_limits(l: &Limits) -> Limiter {
        Limiter::new(l.requests_per_second, l.request_burst, l.request_backlog)
    }

    /// Takes one token for `sender` at time `now`.
    pub fn admit(&self, sender: &str, now: Instant) -> Admission {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() > KEEP {
            let (rate, burst) = (self.rate, self.burst);
            buckets.retain(|_, b| b.tokens + now.duration_since(b.at).as_secs_f64() * rate < burst);
        }
        let b = buckets.entry(sender.to_string()).or_insert(Bucket { tokens: self.burst, at: now });
        b.tokens = (b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * self.rate).min(self.burst);
        b.at = now;
        if b.tokens < -self.backlog {
            return Admission::Refuse;
        }
        b.tokens -= 1.0;
        if b.tokens >= 0.0 {
            Admission::After(Duration::ZERO)
        } else {
            Admission::After(Duration::from_secs_f64(-b.tokens / self.rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_requests_wait_at_the_rate() {
        let l = Limiter::new(10.0, 3.0, 5.0);
        let t = Instant::now();
        for _ in 0..3 {
            assert_eq!(l.admit("a", t), Admission::After(Duration::ZERO));
        }
        assert_eq!(l.admit("a", t), Admission::After(Duration::from_millis(100)));
        assert_eq!(l.admit("a", t), Admission::After(Duration::from_millis(200)));
        // Another sender is not affected.
        assert_eq!(l.admit("b", t), Admission::After(Duration::ZERO));
        // Time refills the bucket.
        assert_eq!(l.admit("c", t), Admission::After(Duration::ZERO));
        let later = t + Duration::from_secs(10);
        assert_eq!(l.admit("a", later), Admission::After(Duration::ZERO));
    }

    #[test]
    fn a_sender_too_far_ahead_is_refused() {
        let l = Limiter::new(1.0, 1.0, 3.0);
        let t = Instant::now();
        let mut refused = 0;
        for _ in 0..10 {
            if l.admit("a", t) == Admission::Refuse {
                refused += 1;
            }
        }
        assert_eq!(refused, 5, "the burst token and 4 reserved ones pass, the rest are refused");
    }
}
