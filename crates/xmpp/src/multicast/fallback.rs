//! What happens when the multicast service refuses: the refused message's pushes go out one
//! by one after all, and multicast stops for this connection.
//!
//! XEP-0033 has no acknowledgement: a multicast message that is accepted is simply routed,
//! and one that is refused comes back as an error carrying its id, from the service. So every
//! batch sent is remembered for a while (long enough for any error to come back through the
//! server; bounded in recipients, so a burst cannot hold memory without limit), and an error
//! for one of them resends its recipients' pushes. Nothing was delivered for a refused
//! message: both servers check a message whole before routing any copy.
//!
//! A refusal is remembered: the service said `forbidden` (we are not on its list),
//! `not-acceptable` (over its limits) or `service-unavailable` (it is gone), none of which
//! the next message would change, so every later change goes one stanza per subscriber
//! until the link is made again (and the service discovered again). The caller logs the
//! first refusal and counts every one.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::stanza::MulticastPush;
use crate::payloads::Push;

/// How long a sent batch is kept for a possible refusal.
pub const KEEP: Duration = Duration::from_secs(60);
/// At most this many recipients are kept over all remembered batches.
pub const MAX_KEPT_RECIPIENTS: usize = 1_000_000;

/// Batches sent through the service and whether it has refused one. See the module docs.
#[derive(Debug)]
pub struct Fallback {
    sent: VecDeque<(Instant, MulticastPush)>,
    kept: usize,
    keep: Duration,
    max_kept: usize,
    refused: Option<String>,
}

/// What a refusal means.
#[derive(Debug, PartialEq)]
pub struct Refusal {
    /// The refused message's pushes, one per recipient, to send now; empty when the
    /// message was no longer remembered (its subscribers see the gap and pull).
    pub resend: Vec<Push>,
    /// This is the first refusal on this connection (log it).
    pub first: bool,
}

impl Default for Fallback {
    fn default() -> Fallback {
        Fallback::new(KEEP, MAX_KEPT_RECIPIENTS)
    }
}

impl Fallback {
    /// Keeps batches for `keep`, and at most `max_kept` recipients in all.
    pub fn new(keep: Duration, max_kept: usize) -> Fallback {
        Fallback { sent: VecDeque::new(), kept: 0, keep, max_kept, refused: None }
    }

    /// Whether multicast may still be used: no refusal so far.
    pub fn usable(&self) -> bool {
        self.refused.is_none()
    }

    /// The condition of the first refusal, if there was one.
    pub fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// `batch` was handed to the link at `now`.
    pub fn sent(&mut self, batch: MulticastPush, now: Instant) {
        self.expire(now);
        self.kept += batch.recipients.len();
        self.sent.push_back((now, batch));
        while self.kept > self.max_kept {
            let Some((_, old)) = self.sent.pop_front() else { break };
            self.kept -= old.recipients.len();
        }
    }

    /// The service answered the message with stanza id `id` with an error `condition`
    /// (e.g. `forbidden`) at `now`. `None` if `id` is not a multicast message of ours.
    pub fn refusal(&mut self, id: &str, condition: &str, now: Instant) -> Option<Refusal> {
        if !id.starts_with('m') {
            return None;
        }
        self.expire(now);
        let first = self.refused.is_none();
        if first {
            self.refused = Some(condition.to_string());
        }
        match self.sent.iter().position(|(_, b)| b.id == id) {
            Some(i) => {
                let (_, batch) = self.sent.remove(i).expect("found above");
                self.kept -= batch.recipients.len();
                Some(Refusal { resend: batch.singles(), first })
            }
            None => Some(Refusal { resend: Vec::new(), first }),
        }
    }

    /// Forgets everything, as a new connection starts from nothing.
    pub fn reset(&mut self) {
        *self = Fallback::new(self.keep, self.max_kept);
    }

    fn expire(&mut self, now: Instant) {
        while let Some((at, _)) = self.sent.front() {
            if now.duration_since(*at) < self.keep {
                break;
            }
            let (_, old) = self.sent.pop_front().expect("front exists");
            self.kept -= old.recipients.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::multicast::test_body;
    use std::sync::Arc;

    fn batch(id: &str, n: usize) -> MulticastPush {
        let body = test_body("v");
        let recipients: Arc<[String]> = (0..n).map(|i| format!("u{i}@localhost")).collect();
        MulticastPush::new("multicast.localhost".into(), id.into(), recipients, body)
    }

    #[test]
    fn a_refused_batch_is_resent_one_by_one_and_multicast_stops() {
        let t0 = Instant::now();
        let mut f = Fallback::default();
        assert!(f.usable());
        f.sent(batch("mpush-1", 3), t0);
        f.sent(batch("mpush-4", 2), t0);
        let r = f.refusal("mpush-4", "forbidden", t0).unwrap();
        assert!(r.first);
        let to: Vec<&str> = r.resend.iter().map(|p| p.to.as_str()).collect();
        assert_eq!(to, ["u0@localhost", "u1@localhost"]);
        assert!(!f.usable());
        assert_eq!(f.refused(), Some("forbidden"));
        // The next refusal is not the first, and a message refused twice is resent once.
        let r = f.refusal("mpush-1", "forbidden", t0).unwrap();
        assert!(!r.first);
        assert_eq!(r.resend.len(), 3);
        assert!(f.refusal("mpush-1", "forbidden", t0).unwrap().resend.is_empty());
        // Not one of ours.
        assert_eq!(f.refusal("push-9", "forbidden", t0), None);
        f.reset();
        assert!(f.usable());
    }

    #[test]
    fn batches_are_kept_for_a_while_and_within_a_recipient_budget() {
        let t0 = Instant::now();
        let mut f = Fallback::new(Duration::from_secs(10), 5);
        f.sent(batch("ma", 3), t0);
        f.sent(batch("mb", 2), t0);
        f.sent(batch("mc", 2), t0); // over the budget: "ma" goes
        assert!(f.refusal("ma", "not-acceptable", t0).unwrap().resend.is_empty());
        assert_eq!(f.refusal("mb", "not-acceptable", t0).unwrap().resend.len(), 2);
        // Past the keeping time.
        assert!(f.refusal("mc", "not-acceptable", t0 + Duration::from_secs(11)).unwrap().resend.is_empty());
    }
}
