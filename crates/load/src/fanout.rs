//! `fanout`: how long one publish takes to reach many subscribers.
//!
//! 1. Subscribes S JIDs of our own domain, `sub{i}@DOMAIN`, K in flight. Each subscribe is
//!    sent *from* the JID it subscribes: smartfeeds (like XEP-0060 §6.1.3.1) wants the
//!    subscribed JID's bare JID to be the sender's, and a component may send from any JID
//!    of its domain. The node must exist (smartfeeds: publish to it once first).
//!    With `--sessions`, the subscribers are client sessions of the server instead
//!    (`session`: anonymous logins, one connection each), each subscribing its own bare JID
//!    over its own session, as real readers do.
//! 2. Publishes P items one at a time (from `--from`, default our domain) and, for each,
//!    measures the time from sending the publish until the last of the S notifications
//!    for that item has arrived. The next publish starts then (or after `--timeout`).
//! 3. Waits `--settle` seconds for stragglers and duplicates, then checks every subscriber
//!    got every item exactly once, and that the SHIM headers chain: all S copies of a push
//!    carry the same `LastCursor` and `TotalItems`, and each push's `PreviousCursor` is the
//!    previous push's `LastCursor` with `TotalItems` one higher.
//! 4. Unsubscribes them again (unless `--keep-subscriptions`).
//!
//! The notifications are counted by a collector task fed by the link's inbox, so counting
//! never waits on the publisher. They arrive as bytes and the collector reads only what it
//! checks (`scan`), so the tool's own CPU per notification (`tool_cpu_us_per_notification`,
//! about 7 µs) stays far below the server's and the service's.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Args;
use tokio::sync::{mpsc, oneshot, watch};

use crate::link::{Inbox, Link};
use crate::publish::default_prefix;
use crate::report::{Report, Tally, percentiles};
use crate::session::{Listener, Session};
use crate::stanzas::{SyncHeaders, outcome, publish, push_facts, subscription, sync_headers};
use crate::{Ctx, pool, procstat, scan};

#[derive(Args, Debug, Clone)]
pub struct FanoutArgs {
    /// Subscribers (JIDs sub0@DOMAIN … sub{S-1}@DOMAIN).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub subscribers: u32,
    /// Items published, one at a time.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub publishes: u32,
    /// Publish from this JID of our domain (default: the domain itself).
    #[arg(long)]
    pub from: Option<String>,
    /// Publish through a second component connection, as this domain (same server and
    /// secret), instead of the subscribers' own. In a deployment the publisher is never the
    /// connection its subscribers are behind; a server that handles a publish in the
    /// sender's process (ejabberd) would otherwise build and route every copy inside the
    /// process that also receives them all. The service must let this domain publish.
    #[arg(long)]
    pub publisher: Option<String>,
    /// Receive the notifications over this many connections of our domain (the first is
    /// the one that subscribes). One connection is one process in the server that every
    /// copy passes through, which bounds both services alike; users of a real server each
    /// have a session of their own. A server that takes several connections for one
    /// component spreads the copies over them (ejabberd; Prosody refuses a second one).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub receivers: u32,
    /// Subscribers are users of the server instead of JIDs of our component: one client
    /// session each, logged in anonymously (SASL ANONYMOUS) on the server's c2s port at
    /// this address, each subscribing over its own session. Every copy then reaches its
    /// own session process in the server, as with real readers, instead of all passing
    /// through our component's one connection. The publishes go through our component.
    #[arg(long, value_name = "C2S_ADDR")]
    pub sessions: Option<SocketAddr>,
    /// The server domain the sessions log in to (it must allow anonymous logins).
    #[arg(long, default_value = "localhost")]
    pub session_domain: String,
    /// Item id prefix (default: `f` and the current Unix time in ms).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Seconds to wait after the last publish for late or duplicate notifications.
    #[arg(long, default_value_t = 1.0)]
    pub settle: f64,
    /// Leave the subscriptions in place at the end.
    #[arg(long)]
    pub keep_subscriptions: bool,
    /// The service sends no SHIM sync headers (Prosody's and ejabberd's pubsub): count each
    /// subscriber's copies, but do not check headers.
    #[arg(long)]
    pub without_headers: bool,
}

/// The first copy of one push to arrive.
#[derive(Clone, Debug)]
struct FirstCopy {
    at: Instant,
    /// Its SHIM headers.
    headers: SyncHeaders,
    /// Its `<headers/>` element as written: a later copy with the same bytes carries the
    /// same headers, so only copies that differ are read.
    raw: Vec<u8>,
}

/// What the collector saw.
#[derive(Default)]
struct Seen {
    /// Copies received per (publish, subscriber), `p * S + i`.
    copies: Vec<u8>,
    /// Subscribers still waited for, per publish.
    waiting: Vec<u32>,
    /// Per publish: its first copy.
    first: Vec<Option<FirstCopy>>,
    /// Copies whose headers differ from the first copy's.
    header_mismatches: u64,
    /// Copies without SHIM headers.
    no_headers: u64,
    duplicates: u64,
    /// Notifications of items this run did not publish: services that send the last item
    /// on subscription (ejabberd's `send_last_published_item`) do that. Not an error.
    earlier_items: u64,
    /// Pushes to the tool's own domain (no local part), which created the node: services
    /// that subscribe a node's owner to it (libervia-pubsub) do that. Not an error.
    to_owner: u64,
    /// Messages for JIDs we did not subscribe, for publishes we did not make, or not pushes.
    unexpected: u64,
}

/// Which subscriber a push is for: `sub{i}@DOMAIN[/…]` with `i < subscribers`.
fn subscriber_index(to: &str, domain: &str, subscribers: u32) -> Option<u32> {
    let (local, rest) = to.split_once('@')?;
    let host = rest.split('/').next()?;
    let i: u32 = local.strip_prefix("sub")?.parse().ok()?;
    (host == domain && i < subscribers).then_some(i)
}

/// Who the subscribers are.
enum Subscribers {
    /// `sub{i}@DOMAIN`, JIDs of our component, `i < count`.
    Numbered { domain: String, count: u32 },
    /// Client sessions: subscriber `i`'s bare JID maps to `i`.
    Named(HashMap<String, u32>),
}

impl Subscribers {
    /// Which subscriber a push addressed `to` is for.
    fn index(&self, to: &str) -> Option<u32> {
        match self {
            Subscribers::Numbered { domain, count } => subscriber_index(to, domain, *count),
            Subscribers::Named(jids) => jids.get(to.split('/').next()?).copied(),
        }
    }
}

/// What the collector expects to see.
struct Expected {
    who: Subscribers,
    /// The run's item id prefix.
    prefix: String,
    /// Which subscribers did subscribe.
    subscribed: Vec<bool>,
    publishes: u32,
    /// Whether pushes must carry SHIM headers.
    check_headers: bool,
}

/// Counts pushes until `stop` fires; tells `done` when a publish has reached everyone.
async fn collect(
    mut inbox: Inbox,
    expected: Expected,
    done: mpsc::UnboundedSender<(u32, Instant)>,
    mut stop: oneshot::Receiver<()>,
) -> Seen {
    let Expected { who, prefix, subscribed, publishes, check_headers } = expected;
    let s = subscribed.len();
    let expected = subscribed.iter().filter(|&&b| b).count() as u32;
    let mut seen = Seen {
        copies: vec![0; s * publishes as usize],
        waiting: vec![expected; publishes as usize],
        first: vec![None; publishes as usize],
        ..Default::default()
    };
    let item_prefix = format!("{prefix}-");
    loop {
        let el: Vec<u8> = tokio::select! {
            el = inbox.0.recv() => match el { Some(el) => el, None => break },
            _ = &mut stop => break,
        };
        let now = Instant::now();
        let to_attr = scan::attr(&el, "to");
        let to = to_attr.as_deref().and_then(|to| who.index(to));
        let facts = if scan::name(&el) == b"message" { push_facts(&el) } else { None };
        if to.is_none() && facts.is_some() && to_attr.is_some_and(|t| !t.contains('@')) {
            seen.to_owner += 1;
            continue;
        }
        if let (Some(_), Some(f)) = (to, &facts)
            && !f.item.starts_with(&item_prefix)
        {
            seen.earlier_items += 1;
            continue;
        }
        let p = facts.as_ref().and_then(|f| f.item.strip_prefix(&item_prefix)?.parse::<u32>().ok());
        let (Some(i), Some(facts), Some(p)) = (to, facts, p) else {
            seen.unexpected += 1;
            continue;
        };
        if p >= publishes || !subscribed[i as usize] {
            seen.unexpected += 1;
            continue;
        }
        let slot = &mut seen.copies[p as usize * s + i as usize];
        *slot = slot.saturating_add(1);
        if *slot > 1 {
            seen.duplicates += 1;
            continue;
        }
        let raw = facts.headers.unwrap_or_default();
        let lacking = |h: &SyncHeaders| check_headers && (h.last_cursor.is_none() || h.total_items.is_none());
        match &seen.first[p as usize] {
            None => {
                let headers = sync_headers(raw);
                seen.no_headers += lacking(&headers) as u64;
                seen.first[p as usize] = Some(FirstCopy { at: now, headers, raw: raw.to_vec() });
            }
            Some(_) if !check_headers => {}
            Some(first) if first.raw == raw => seen.no_headers += lacking(&first.headers) as u64,
            Some(first) => {
                let headers = sync_headers(raw);
                seen.no_headers += lacking(&headers) as u64;
                seen.header_mismatches += (headers != first.headers) as u64;
            }
        }
        let waiting = &mut seen.waiting[p as usize];
        *waiting -= 1;
        if *waiting == 0 {
            let _ = done.send((p, now));
        }
    }
    seen
}

/// Subscribes (or unsubscribes) sub0…sub{n-1}; the outcome of each.
/// No new request starts after `deadline`.
async fn subscriptions(ctx: &Ctx, op: &'static str, who: &[u32], deadline: Instant) -> (Tally, Vec<bool>) {
    let c = &ctx.common;
    let outcomes = std::cell::RefCell::new(vec![false; who.len()]);
    let tally = pool::run_indexed(who.len() as u64, c.in_flight, deadline, |k| {
        let jid = format!("sub{}@{}", who[k as usize], c.component);
        let payload = subscription(op, &c.node, &jid);
        let outcomes = &outcomes;
        async move {
            let t0 = Instant::now();
            let reply = ctx.link.iq("set", Some(&jid), &c.service, &payload, ctx.timeout()).await;
            let latency = t0.elapsed();
            outcome(&reply.map_err(|e| e.to_string())?)?;
            outcomes.borrow_mut()[k as usize] = true;
            Ok(latency)
        }
    })
    .await;
    (tally, outcomes.into_inner())
}

/// Opens `n` client sessions on the c2s port at `addr`, each subscribing its own bare JID;
/// the subscribe outcomes and the sessions that subscribed, by index.
async fn open_sessions(ctx: &Ctx, addr: SocketAddr, domain: &str, n: u32) -> (Tally, Vec<Option<Session>>) {
    let c = &ctx.common;
    let sessions = std::cell::RefCell::new((0..n).map(|_| None).collect::<Vec<Option<Session>>>());
    let tally = pool::run_indexed(u64::from(n), c.in_flight, ctx.deadline, |k| {
        let sessions = &sessions;
        async move {
            let mut session = Session::open(addr, domain).await?;
            let payload = subscription("subscribe", &c.node, &session.jid);
            let t0 = Instant::now();
            let reply = tokio::time::timeout(ctx.timeout(), session.iq("set", Some(&c.service), &payload))
                .await
                .map_err(|_| "timeout".to_string())??;
            let latency = t0.elapsed();
            outcome(&reply)?;
            sessions.borrow_mut()[k as usize] = Some(session);
            Ok(latency)
        }
    })
    .await;
    (tally, sessions.into_inner())
}

/// Stops each session's listener, unsubscribes the session (when `unsubscribe`) and ends
/// it; the outcomes, a session whose stream ended early counted as an error.
async fn close_sessions(ctx: &Ctx, listeners: Vec<Listener>, unsubscribe: bool) -> Tally {
    let c = &ctx.common;
    let close_one = |listener: Listener| async move {
        let mut session = match listener.await {
            Ok(Ok(session)) => session,
            Ok(Err(why)) => return Err(format!("session lost: {why}")),
            Err(e) => return Err(format!("session task failed: {e}")),
        };
        let t0 = Instant::now();
        let outcome = if unsubscribe {
            let payload = subscription("unsubscribe", &c.node, &session.jid);
            match tokio::time::timeout(ctx.timeout(), session.iq("set", Some(&c.service), &payload)).await {
                Ok(reply) => reply.and_then(|r| outcome(&r)),
                Err(_) => Err("timeout".to_string()),
            }
        } else {
            Ok(())
        };
        session.close().await;
        outcome.map(|()| t0.elapsed())
    };
    pool::run_each(futures::stream::iter(listeners), c.in_flight, close_one).await
}

/// Publishes item `p` (sent at `sent`) and waits for its ack and for the collector to
/// report it complete. Returns the ack outcome and, when every subscriber got it, the time
/// to the last copy.
async fn publish_one(
    ctx: &Ctx,
    link: &Link,
    payload: &str,
    from: Option<&str>,
    (p, sent): (u32, Instant),
    done: &mut mpsc::UnboundedReceiver<(u32, Instant)>,
) -> (Result<Duration, String>, Option<Duration>) {
    let ack = link.iq("set", from, &ctx.common.service, payload, ctx.timeout());
    tokio::pin!(ack);
    let give_up = tokio::time::sleep(ctx.timeout());
    tokio::pin!(give_up);
    let (mut acked, mut complete) = (None, None);
    while acked.is_none() || complete.is_none() {
        tokio::select! {
            reply = &mut ack, if acked.is_none() => {
                let latency = sent.elapsed();
                let result = reply.map_err(|e| e.to_string()).and_then(|r| outcome(&r)).map(|()| latency);
                let failed = result.is_err();
                acked = Some(result);
                if failed {
                    break;
                }
            }
            d = done.recv(), if complete.is_none() => match d {
                Some((q, at)) if q == p => complete = Some(at.duration_since(sent)),
                Some(_) => {}
                None => break,
            },
            _ = &mut give_up => break,
        }
    }
    (acked.unwrap_or_else(|| Err("timeout".into())), complete)
}

/// Checks that the pushes chain: `PreviousCursor` of each is the `LastCursor` of the one
/// before, and `TotalItems` grows by one. Counts the breaks.
fn chain_breaks(seen: &Seen) -> u64 {
    let mut breaks = 0;
    for pair in seen.first.windows(2) {
        let (Some(a), Some(b)) = (&pair[0], &pair[1]) else { continue };
        let (a, b) = (&a.headers, &b.headers);
        let count = |t: &Option<String>| t.as_deref().and_then(|t| t.parse::<u64>().ok());
        if b.previous_cursor != a.last_cursor || count(&b.total_items) != count(&a.total_items).map(|t| t + 1) {
            breaks += 1;
        }
    }
    breaks
}

pub async fn run(ctx: &Ctx, args: &FanoutArgs, inbox: Inbox) -> Result<Report, String> {
    let c = &ctx.common;
    // The server may hand any receiver an answer meant for another's iq: only the
    // publisher's connection, which is not one of them, may ask while they are up.
    if args.receivers > 1 && args.publisher.is_none() {
        return Err("--receivers above 1 needs --publisher".into());
    }
    if args.sessions.is_some() && (args.receivers > 1 || args.publisher.is_some()) {
        return Err("--sessions receive over client sessions and publish through our component: \
                    no --receivers or --publisher with it"
            .into());
    }
    let prefix = args.prefix.clone().unwrap_or_else(|| default_prefix("f"));
    let all: Vec<u32> = (0..args.subscribers).collect();

    let sub_started = Instant::now();
    let (mut sub_tally, subscribed, who, sessions) = match args.sessions {
        None => {
            let (tally, subscribed) = subscriptions(ctx, "subscribe", &all, ctx.deadline).await;
            let who = Subscribers::Numbered { domain: c.component.clone(), count: args.subscribers };
            (tally, subscribed, who, Vec::new())
        }
        Some(addr) => {
            // Every session is a socket here.
            let _ = rlimit::increase_nofile_limit(u64::MAX);
            let (tally, sessions) = open_sessions(ctx, addr, &args.session_domain, args.subscribers).await;
            let subscribed = sessions.iter().map(Option::is_some).collect();
            let jids = sessions.iter().enumerate().filter_map(|(i, s)| Some((s.as_ref()?.jid.clone(), i as u32)));
            (tally, subscribed, Subscribers::Named(jids.collect()), sessions)
        }
    };
    let sub_elapsed = sub_started.elapsed();
    let n_subscribed = subscribed.iter().filter(|&&b| b).count() as u64;
    if n_subscribed == 0 {
        return Err(format!("no subscription succeeded: {}", sub_tally.error_kinds()));
    }

    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let (stop_tx, stop_rx) = oneshot::channel();
    let expected = Expected {
        who,
        prefix: prefix.clone(),
        subscribed: subscribed.clone(),
        publishes: args.publishes,
        check_headers: !args.without_headers,
    };
    let mut receivers = Vec::new();
    for _ in 1..args.receivers {
        let link = Link::connect_into(c.server, &c.component, &c.secret, ctx.link.inbox())
            .await
            .map_err(|e| format!("cannot log in as one more {} at {}: {e}", c.component, c.server))?;
        receivers.push(link);
    }
    // With sessions, they are what the notifications arrive over; our component's own
    // inbox is drained (it expects nothing).
    let (stop_listening, listening_stopped) = watch::channel(false);
    let (inbox, listeners) = if args.sessions.is_some() {
        inbox.drain();
        let (tx, rx) = mpsc::unbounded_channel();
        let listeners: Vec<_> =
            sessions.into_iter().flatten().map(|s| s.listen(tx.clone(), listening_stopped.clone())).collect();
        (Inbox(rx), listeners)
    } else {
        (inbox, Vec::new())
    };
    let collector = tokio::spawn(collect(inbox, expected, done_tx, stop_rx));

    let publisher = match &args.publisher {
        Some(domain) => {
            let (link, inbox) = Link::connect(c.server, domain, &c.secret)
                .await
                .map_err(|e| format!("cannot log in as the publisher {domain} at {}: {e}", c.server))?;
            // Its publishes' answers come back through `iq`; nothing else is expected.
            inbox.drain();
            Some(link)
        }
        None => None,
    };
    let link = publisher.as_deref().unwrap_or(&ctx.link);

    let rss = || c.service_pid.and_then(procstat::rss_mib);
    let rss_before = rss();
    let cpu = ctx.cpu_window();
    let started = Instant::now();
    let (mut acks, mut fanouts) = (Tally::default(), Tally::default());
    let mut sent_at = Vec::new();
    for p in 0..args.publishes {
        if !ctx.open() {
            break;
        }
        let payload = publish(&c.node, &format!("{prefix}-{p}"), &format!("Fan-out item {p}"), 0);
        sent_at.push(Instant::now());
        let (ack, complete) =
            publish_one(ctx, link, &payload, args.from.as_deref(), (p, sent_at[p as usize]), &mut done_rx).await;
        match ack {
            Ok(latency) => acks.ok(latency),
            Err(kind) => {
                acks.error(kind.clone());
                fanouts.error(format!("publish failed: {kind}"));
                continue;
            }
        }
        match complete {
            Some(latency) => fanouts.ok(latency),
            None => fanouts.error("not every subscriber notified within --timeout"),
        }
    }
    let elapsed = started.elapsed();
    let cpu = cpu.finish();
    if let Some(publisher) = &publisher {
        publisher.close();
    }
    let rss_after = rss();
    tokio::time::sleep(Duration::from_secs_f64(args.settle.clamp(0.0, 60.0))).await;
    let _ = stop_tx.send(());
    let seen = collector.await.map_err(|e| format!("collector task failed: {e}"))?;
    // Closed, and gone from the server's routes, before the unsubscribes' answers come.
    for link in &receivers {
        link.close();
    }
    let closing = Instant::now();
    while receivers.iter().any(|l| l.closed_reason().is_none()) && closing.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let expected = acks.lat_us.len() as u64 * n_subscribed;
    let delivered = seen.copies.iter().filter(|&&n| n > 0).count() as u64;
    let breaks = if args.without_headers { 0 } else { chain_breaks(&seen) };
    let mut first_us: Vec<u64> = (seen.first.iter().zip(&sent_at))
        .filter_map(|(first, sent)| Some(first.as_ref()?.at.duration_since(*sent).as_micros() as u64))
        .collect();
    for (kind, n) in [
        ("duplicate notifications", seen.duplicates),
        ("unexpected stanzas", seen.unexpected),
        ("pushes without SHIM headers", seen.no_headers),
        ("copies with headers unlike the first copy's", seen.header_mismatches),
        ("header chain breaks", breaks),
    ] {
        if n > 0 {
            *fanouts.errors.entry(kind.to_string()).or_default() += n;
        }
    }

    let (unsub_tally, unsub_elapsed) = if args.sessions.is_some() {
        let _ = stop_listening.send(true);
        let t0 = Instant::now();
        (close_sessions(ctx, listeners, !args.keep_subscriptions).await, t0.elapsed())
    } else if args.keep_subscriptions {
        (Tally::default(), Duration::ZERO)
    } else {
        let who: Vec<u32> = all.iter().copied().filter(|&i| subscribed[i as usize]).collect();
        // Clean-up gets its own time budget, as long as the run's.
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_secs_f64(c.duration);
        (subscriptions(ctx, "unsubscribe", &who, deadline).await.0, t0.elapsed())
    };

    let mut report = ctx.report("fanout");
    // ops and rate are notifications; the latencies are per publish, to the last copy.
    report.standard(delivered, &mut fanouts, elapsed, &cpu);
    // What receiving costs the tool itself: it must stay far below what the service and
    // the server spend per notification, or the tool would be what is measured.
    let tool_cpu = cpu.get(2).copied().flatten();
    report.num("tool_cpu_us_per_notification", tool_cpu.filter(|_| delivered > 0).map(|s| s * 1e6 / delivered as f64));
    report.str("publisher", args.publisher.as_deref().unwrap_or(&c.component));
    report.int("receivers", u64::from(args.receivers));
    report.int("subscribers", n_subscribed);
    report.int("publishes", sent_at.len() as u64);
    report.int("publish_errors", acks.error_count());
    report.int("expected", expected);
    report.int("missing", expected.saturating_sub(delivered));
    report.int("duplicates", seen.duplicates);
    report.int("unexpected", seen.unexpected);
    report.int("earlier_items", seen.earlier_items);
    report.int("to_owner", seen.to_owner);
    report.int("header_chain_breaks", breaks);
    // The service's memory before the first publish and after the last: flat means the
    // fan-out holds nothing per publish.
    report.num("service_rss_mib_before", rss_before);
    report.num("service_rss_mib_after", rss_after);
    let ack = percentiles(&mut acks.lat_us);
    report.num("ack_p50_ms", ack.map(|p| p.p50));
    report.num("ack_p99_ms", ack.map(|p| p.p99));
    // Time to the first copy: how soon fan-out starts, beside how long it takes (p50_ms).
    let first = percentiles(&mut first_us);
    report.num("first_copy_p50_ms", first.map(|p| p.p50));
    report.num("first_copy_p99_ms", first.map(|p| p.p99));
    report.num("subscribe_rate", Some(sub_tally.lat_us.len() as f64 / sub_elapsed.as_secs_f64()));
    report.num("subscribe_p99_ms", percentiles(&mut sub_tally.lat_us).map(|p| p.p99));
    report.int("subscribe_errors", sub_tally.error_count());
    report.str("subscribe_error_kinds", &sub_tally.error_kinds());
    if !args.keep_subscriptions {
        report.num("unsubscribe_s", Some(unsub_elapsed.as_secs_f64()));
        report.int("unsubscribe_errors", unsub_tally.error_count());
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriber_jids_map_to_indexes() {
        assert_eq!(subscriber_index("sub7@bench.localhost", "bench.localhost", 10), Some(7));
        assert_eq!(subscriber_index("sub7@bench.localhost/r", "bench.localhost", 10), Some(7));
        assert_eq!(subscriber_index("sub10@bench.localhost", "bench.localhost", 10), None);
        assert_eq!(subscriber_index("sub1@other", "bench.localhost", 10), None);
        assert_eq!(subscriber_index("bench.localhost", "bench.localhost", 10), None);
    }

    #[test]
    fn session_jids_map_to_indexes_with_or_without_resource() {
        let who = Subscribers::Named([("ab12@localhost".to_string(), 0), ("cd34@localhost".to_string(), 1)].into());
        assert_eq!(who.index("cd34@localhost"), Some(1));
        assert_eq!(who.index("ab12@localhost/res-9"), Some(0));
        assert_eq!(who.index("ab12@otherhost"), None);
        assert_eq!(who.index("localhost"), None);
        let numbered = Subscribers::Numbered { domain: "bench.localhost".into(), count: 3 };
        assert_eq!(numbered.index("sub2@bench.localhost/x"), Some(2));
        assert_eq!(numbered.index("sub3@bench.localhost"), None);
    }

    #[test]
    fn header_chain_checks_cursor_and_count() {
        let h = |last: &str, prev: Option<&str>, total: u64| {
            let headers = SyncHeaders {
                last_cursor: Some(last.into()),
                previous_cursor: prev.map(String::from),
                total_items: Some(total.to_string()),
            };
            Some(FirstCopy { at: Instant::now(), headers, raw: Vec::new() })
        };
        let good = Seen {
            first: vec![h("a", None, 1), h("b", Some("a"), 2), None, h("d", Some("c"), 9)],
            ..Default::default()
        };
        assert_eq!(chain_breaks(&good), 0);
        let bad =
            Seen { first: vec![h("a", None, 1), h("b", Some("x"), 2), h("c", Some("b"), 4)], ..Default::default() };
        assert_eq!(chain_breaks(&bad), 2);
    }
}
