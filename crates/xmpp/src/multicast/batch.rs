//! Which stanzas one change's pushes go out as: copies of the same push are grouped and sent
//! as `bcc` multicast batches within the service's limits; what would not gain is sent
//! one stanza per subscriber, as without a service.
//!
//! Two pushes are the same push when they share their body (`Arc<PushBody>`): the pusher
//! builds one body per view and node name as the subscriber wrote it, so a group is exactly
//! "the subscribers of one view under one spelling", and every member gets the same bytes.

use std::collections::HashMap;
use std::sync::Arc;

use super::stanza::MulticastPush;
use crate::payloads::Push;
use crate::stanza_parts::{Parts, ToParts, items};
use xmpp_parsers::iq::Iq;

/// What the multicast service and the server allow in one message, and when a batch is
/// worth sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Addresses per message (the service's advertised `message` limit); `None`: no limit.
    pub max_addresses: Option<usize>,
    /// Bytes of one multicast message on the wire: the server drops a larger stanza
    /// (Prosody's component stream takes 512 KiB by default), so keep well under it.
    pub max_bytes: usize,
    /// The fewest recipients sent as one multicast message. Below it each gets its own
    /// stanza: with one recipient there is nothing to share, and a batch that is refused
    /// costs a round trip before its pushes go out after all.
    pub min_recipients: usize,
    /// Addresses in a group's first batch; each next batch may hold twice as many as the
    /// one before, up to the limits above. A server routes no copy of a message before it
    /// has read and parsed all of it: a first message of 256 KiB (5,000 addresses) kept
    /// every subscriber of ejabberd waiting about 30 ms; a small first batch reaches its
    /// subscribers at once, and the larger ones after it keep the messages per change few.
    pub first_batch: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_addresses: None, max_bytes: 256 * 1024, min_recipients: 2, first_batch: 64 }
    }
}

impl Limits {
    /// The smallest batch sent as one multicast message: `min_recipients`, and never one
    /// recipient alone.
    fn fewest(&self) -> usize {
        self.min_recipients.max(2)
    }
}

/// One stanza to write, or a receipt to sign once what came before is written.
#[derive(Debug)]
pub enum Outgoing {
    /// A push to one subscriber.
    Single(Push),
    /// One push to many subscribers, through the multicast service.
    Multicast(MulticastPush),
    /// A question to the multicast service, queued behind the messages before it: the
    /// service answers in the order it reads, so its answer means every earlier message
    /// was taken or refused (see [`LinkMulticast::probe`](super::LinkMulticast::probe)).
    Probe(Box<Iq>),
    /// No stanza: the link signs it once every stanza queued before it is written to the
    /// server's socket.
    Receipt(feed::Receipt),
}

impl ToParts for Outgoing {
    fn parts(&self) -> Result<Parts<'_>, xso::error::Error> {
        match self {
            Outgoing::Single(p) => p.parts(),
            Outgoing::Multicast(m) => m.parts(),
            Outgoing::Probe(iq) => items(&**iq),
            Outgoing::Receipt(_) => Ok(Box::new(std::iter::empty())),
        }
    }
}

impl Outgoing {
    /// How many subscribers this stanza reaches.
    pub fn recipients(&self) -> usize {
        match self {
            Outgoing::Single(_) => 1,
            Outgoing::Multicast(m) => m.recipients.len(),
            Outgoing::Probe(_) | Outgoing::Receipt(_) => 0,
        }
    }
}

/// The stanzas for one change's `pushes` (in the pusher's order), sent through `service`
/// within `limits`. Groups keep the order of their first push, and recipients their order
/// within the group; a batch's id is `m` and the id of its first push, so it is as unique
/// as push ids are.
pub fn plan(pushes: Vec<Push>, service: &str, limits: &Limits) -> Vec<Outgoing> {
    let mut groups: Vec<Vec<Push>> = Vec::new();
    let mut index: HashMap<*const _, usize> = HashMap::new();
    for push in pushes {
        let key = Arc::as_ptr(&push.body);
        match index.get(&key) {
            Some(&i) => groups[i].push(push),
            None => {
                index.insert(key, groups.len());
                groups.push(vec![push]);
            }
        }
    }
    let mut out = Vec::new();
    for group in groups {
        split(group, service, limits, &mut out);
    }
    out
}

/// Cuts one group into batches within the limits, greedily in order, the first ones
/// growing from `first_batch` addresses (see [`Limits::first_batch`]).
fn split(group: Vec<Push>, service: &str, limits: &Limits, out: &mut Vec<Outgoing>) {
    let max_addresses = limits.max_addresses.unwrap_or(usize::MAX).max(1);
    let mut ramp = limits.first_batch.max(limits.fewest());
    let mut batch: Vec<Push> = Vec::new();
    let mut bytes = 0;
    for push in group {
        let address = MulticastPush::address_len(&push.to);
        let full = !batch.is_empty() && (batch.len() >= max_addresses.min(ramp) || bytes + address > limits.max_bytes);
        if full {
            flush(std::mem::take(&mut batch), service, limits, out);
            ramp = ramp.saturating_mul(2);
        }
        if batch.is_empty() {
            bytes = MulticastPush::envelope_len(&push.body, service, &batch_id(&push));
        }
        bytes += address;
        batch.push(push);
    }
    flush(batch, service, limits, out);
}

/// A batch's stanza id: `m` and its first push's id.
fn batch_id(first: &Push) -> String {
    format!("m{}", first.id)
}

/// Sends `batch` as one multicast message, or one by one when it is too small to gain or
/// its body alone is over the byte limit.
fn flush(batch: Vec<Push>, service: &str, limits: &Limits, out: &mut Vec<Outgoing>) {
    let Some(first) = batch.first() else { return };
    let id = batch_id(first);
    let too_big = MulticastPush::envelope_len(&first.body, service, &id) + MulticastPush::address_len(&first.to)
        > limits.max_bytes;
    if batch.len() < limits.fewest() || too_big {
        out.extend(batch.into_iter().map(Outgoing::Single));
        return;
    }
    let body = first.body.clone();
    let recipients: Arc<[String]> = batch.into_iter().map(|p| p.to).collect();
    out.push(Outgoing::Multicast(MulticastPush::new(service.to_string(), id, recipients, body)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::multicast::test_body as body;
    use crate::payloads::PushBody;
    use crate::stanza_parts::to_xml;

    fn pushes(body: &Arc<PushBody>, who: std::ops::Range<usize>, first_id: usize) -> Vec<Push> {
        who.enumerate()
            .map(|(k, i)| Push {
                to: format!("u{i}@localhost"),
                id: format!("push-{}", first_id + k),
                body: body.clone(),
            })
            .collect()
    }

    fn shape(out: &[Outgoing]) -> Vec<String> {
        out.iter()
            .map(|o| match o {
                Outgoing::Single(p) => format!("1:{}", p.to),
                Outgoing::Multicast(m) => {
                    format!("{}:{}..{}", m.recipients.len(), m.recipients[0], m.recipients.last().unwrap())
                }
                Outgoing::Probe(_) => "probe".into(),
                Outgoing::Receipt(_) => "receipt".into(),
            })
            .collect()
    }

    #[test]
    fn groups_by_identical_push_and_keeps_order() {
        let (a, b, c) = (body("v"), body("v?order=created"), body("w"));
        // Interleaved: a, b, a, c, b, a.
        let mut all = Vec::new();
        all.extend(pushes(&a, 0..1, 0));
        all.extend(pushes(&b, 1..2, 1));
        all.extend(pushes(&a, 2..3, 2));
        all.extend(pushes(&c, 3..4, 3));
        all.extend(pushes(&b, 4..5, 4));
        all.extend(pushes(&a, 5..6, 5));
        let out = plan(all, "multicast.localhost", &Limits::default());
        assert_eq!(shape(&out), ["3:u0@localhost..u5@localhost", "2:u1@localhost..u4@localhost", "1:u3@localhost"]);
        let Outgoing::Multicast(m) = &out[0] else { panic!() };
        assert_eq!(m.id, "mpush-0");
        assert_eq!(&*m.recipients, ["u0@localhost", "u2@localhost", "u5@localhost"]);
        assert!(Arc::ptr_eq(&m.body, &a));
        assert_eq!(m.service, "multicast.localhost");
    }

    #[test]
    fn splits_at_the_address_limit_and_sends_a_lone_remainder_alone() {
        let a = body("v");
        let limits = Limits { max_addresses: Some(4), ..Limits::default() };
        let out = plan(pushes(&a, 0..9, 0), "mc", &limits);
        assert_eq!(shape(&out), ["4:u0@localhost..u3@localhost", "4:u4@localhost..u7@localhost", "1:u8@localhost"]);
        let Outgoing::Multicast(second) = &out[1] else { panic!() };
        assert_eq!(second.id, "mpush-4");
    }

    #[test]
    fn first_batches_are_small_and_double() {
        let a = body("v");
        let sizes = |limits: &Limits, n| {
            plan(pushes(&a, 0..n, 0), "mc", limits)
                .iter()
                .map(|o| match o {
                    Outgoing::Multicast(m) => m.recipients.len(),
                    other => panic!("{other:?}"),
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(sizes(&Limits::default(), 1000), [64, 128, 256, 512, 40]);
        // The service's limit caps the ramp.
        let capped = Limits { max_addresses: Some(100), ..Limits::default() };
        assert_eq!(sizes(&capped, 500), [64, 100, 100, 100, 100, 36]);
        // A ramp under the smallest batch worth sending starts there.
        let tiny = Limits { first_batch: 0, min_recipients: 3, ..Limits::default() };
        assert_eq!(sizes(&tiny, 9), [3, 6]);
    }

    #[test]
    fn batches_stay_within_the_byte_limit() {
        let a = body("v");
        let max_bytes = 2_000;
        let limits = Limits { max_bytes, ..Limits::default() };
        let out = plan(pushes(&a, 0..200, 0), "multicast.localhost", &limits);
        assert!(out.len() > 2, "{}", out.len());
        let mut seen = Vec::new();
        for (k, o) in out.iter().enumerate() {
            let Outgoing::Multicast(m) = o else { panic!("{o:?}") };
            let written = to_xml(m).unwrap().len();
            assert!(written <= max_bytes, "{written} > {max_bytes}");
            // Full: one more address would not have fit (the last batch takes the rest).
            assert!(
                written + MulticastPush::address_len("u199@localhost") > max_bytes || k == out.len() - 1,
                "{written}"
            );
            seen.extend(m.recipients.iter().cloned());
        }
        let want: Vec<String> = (0..200).map(|i| format!("u{i}@localhost")).collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn small_groups_and_oversized_bodies_go_one_by_one() {
        let a = body("v");
        let limits = Limits { min_recipients: 3, ..Limits::default() };
        assert_eq!(shape(&plan(pushes(&a, 0..2, 0), "mc", &limits)), ["1:u0@localhost", "1:u1@localhost"]);
        assert_eq!(shape(&plan(pushes(&a, 0..3, 0), "mc", &limits)), ["3:u0@localhost..u2@localhost"]);
        let tiny = Limits { max_bytes: 100, ..Limits::default() };
        assert_eq!(shape(&plan(pushes(&a, 0..2, 0), "mc", &tiny)), ["1:u0@localhost", "1:u1@localhost"]);
        assert!(plan(Vec::new(), "mc", &Limits::default()).is_empty());
    }
}
