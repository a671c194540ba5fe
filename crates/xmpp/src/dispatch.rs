//! Dispatch: what comes in over the component link, handed to the one thing that handles it.
//! Requests (iq get/set) are admitted (the core's per-sender rate, then a slot of the
//! sender's domain and one of the service) and each served on its own task, so a slow store
//! read never blocks the connection loop; multicast answers go to the multicast service's
//! state, bounces to the notifier, link events to the metrics.
//!
//! Shutdown: once the signal is set, new requests are refused with `service-unavailable`,
//! and requests still waiting for their turn are answered at once; each request being
//! served holds a completion token, so whoever shuts down knows when the last has answered
//! (see [`Dispatcher::close`]).

use crate::bounce;
use crate::component::Inbound;
use crate::domain_slots::DomainSlots;
use crate::errors::{resource_constraint, service_unavailable};
use crate::multicast::{self, LinkMulticast};
use crate::notify::{FromService, Notifier};
use crate::reply::Reply;
use crate::router::{Router, Served};
use feed::Store;
use feed::admission::Admission;
use jid::Jid;
use metrics::Metrics;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc, watch};
use xmpp_parsers::iq::Iq;
use xmpp_parsers::message::{Message, MessageType};
use xmpp_parsers::stanza::Stanza;
use xmpp_parsers::stanza_error::StanzaError;

/// Requests served at once; more wait for a slot (the link keeps reading meanwhile).
pub const MAX_IN_FLIGHT: usize = 256;

/// What the dispatcher is built from.
pub struct Parts<S: Store> {
    pub router: Router<S>,
    pub metrics: Arc<Metrics>,
    /// Bounds one sender domain's share of the service's slots.
    pub requests_per_domain: usize,
    pub notifier: Arc<Notifier<S>>,
    /// The link's multicast service: found at each login, used by the notifier.
    pub multicast: Arc<LinkMulticast>,
    /// What the multicast service says (refusals, probe answers), to the notifier, which
    /// resends in order with its pushes.
    pub from_service: mpsc::UnboundedSender<FromService>,
    /// Where replies and our own iqs go (the link's reply queue).
    pub out: mpsc::Sender<Reply>,
    /// The shutdown signal.
    pub closing: watch::Receiver<bool>,
    /// Dropped by each request once answered: the shutdown's completion channel.
    pub done: mpsc::Sender<()>,
    /// Set while the link is up.
    pub linked: watch::Sender<bool>,
}

/// Takes inbound stanzas from the link and serves each request on its own task.
pub struct Dispatcher<S: Store> {
    router: Router<S>,
    metrics: Arc<Metrics>,
    domains: DomainSlots,
    notifier: Arc<Notifier<S>>,
    multicast: Arc<LinkMulticast>,
    from_service: mpsc::UnboundedSender<FromService>,
    /// Taken away by [`Dispatcher::close`], so the link sees the queue close once in-flight
    /// work is done.
    out: Mutex<Option<mpsc::Sender<Reply>>>,
    /// Cloned into each request being served; taken away by [`Dispatcher::close`].
    done: Mutex<Option<mpsc::Sender<()>>>,
    slots: Arc<Semaphore>,
    closing: watch::Receiver<bool>,
    linked: watch::Sender<bool>,
}

impl<S: Store> Dispatcher<S> {
    pub fn new(p: Parts<S>) -> Arc<Self> {
        let dispatcher = Arc::new(Dispatcher {
            router: p.router,
            metrics: p.metrics,
            domains: DomainSlots::new(p.requests_per_domain),
            notifier: p.notifier,
            multicast: p.multicast,
            from_service: p.from_service,
            out: Mutex::new(Some(p.out)),
            done: Mutex::new(Some(p.done)),
            slots: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            closing: p.closing,
            linked: p.linked,
        });
        // The dispatcher's own completion token goes with the signal; those of requests
        // being served go when they have answered.
        let d = dispatcher.clone();
        tokio::spawn(async move {
            let mut closing = d.closing.clone();
            let _ = closing.wait_for(|c| *c).await;
            d.done.lock().unwrap_or_else(|p| p.into_inner()).take();
        });
        dispatcher
    }

    /// After the last request has answered: closes the reply queue, so the link flushes it
    /// and ends its stream.
    pub fn close(&self) {
        self.out.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    fn sender(&self) -> Option<mpsc::Sender<Reply>> {
        self.out.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A completion token for one request, or none once shutdown has begun.
    fn token(&self) -> Option<mpsc::Sender<()>> {
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        done.as_ref().filter(|_| !*self.closing.borrow()).cloned()
    }

    pub fn on_inbound(self: &Arc<Self>, event: Inbound) {
        match event {
            Inbound::Stanza(stanza) => match *stanza {
                Stanza::Iq(iq) => match self.multicast.answer(&iq) {
                    multicast::Answer::Taken(next) => self.send_iqs(next),
                    multicast::Answer::Settled(id) => {
                        let _ = self.from_service.send(FromService::Answered(id));
                    }
                    multicast::Answer::NotOurs => self.on_iq(iq),
                },
                Stanza::Message(m) => self.on_message(m),
                Stanza::Presence(_) => {}
            },
            Inbound::Malformed { header, why, over_limit } => {
                tracing::info!(kind = %header.name, from = ?header.from, %why, "malformed stanza");
                let to = header.from.and_then(|f| Jid::new(&f).ok());
                let request = header.name == "iq" && matches!(header.type_.as_deref(), Some("get" | "set"));
                if let (true, Some(id), Some(to), Some(out)) = (request, header.id, to, self.sender()) {
                    let reply = self.router.malformed(to, id, &why, over_limit);
                    tokio::spawn(async move { out.send(reply.into()).await });
                }
            }
            Inbound::Connected { n } => {
                tracing::debug!(logins = n, "link up");
                self.metrics.connected.set(1);
                self.metrics.connects.inc();
                self.linked.send_replace(true);
                self.send_iqs(self.multicast.link_up());
            }
            Inbound::Disconnected { reason } => {
                tracing::debug!(%reason, "link down");
                self.metrics.connected.set(0);
                self.linked.send_replace(false);
                self.multicast.link_down();
            }
        }
    }

    /// Asks again the multicast discovery queries still unanswered (an answer that went
    /// astray, to another instance of the domain).
    pub fn ask_again(&self) {
        self.send_iqs(self.multicast.ask_again());
    }

    /// Queues iqs of our own (discovery queries) with the replies.
    fn send_iqs(&self, iqs: Vec<Iq>) {
        let Some(out) = self.sender().filter(|_| !iqs.is_empty()) else { return };
        tokio::spawn(async move {
            for iq in iqs {
                if out.send(iq.into()).await.is_err() {
                    return;
                }
            }
        });
    }

    /// Messages to us are push bounces, the multicast service refusing a message, or
    /// nothing we handle. A copy the service delivered bounces from its recipient, so it
    /// counts against that subscriber as a push of our own does.
    fn on_message(self: &Arc<Self>, m: Message) {
        let (MessageType::Error, Some(from)) = (&m.type_, m.from.clone()) else { return };
        let error = m.payloads.iter().find(|p| p.name() == "error").and_then(|e| StanzaError::try_from(e.clone()).ok());
        if let (true, Some(id)) = (self.multicast.is_service(&from), m.id.as_ref()) {
            let condition = error.as_ref().map_or_else(
                || "undefined-condition".to_string(),
                |e| minidom::Element::from(e.defined_condition.clone()).name().to_string(),
            );
            let _ = self.from_service.send(FromService::Refused { id: id.0.clone(), condition });
            return;
        }
        let permanent = bounce::is_permanent(error.as_ref());
        tracing::debug!(%from, ?error, "push bounced");
        let notifier = self.notifier.clone();
        tokio::spawn(async move { notifier.bounced(&from, permanent).await });
    }

    fn on_iq(self: &Arc<Self>, iq: Iq) {
        let Some(out) = self.sender() else { return };
        if let Some(from) = iq.from() {
            self.notifier.alive(from);
        }
        let Some(done) = self.token() else {
            return self.refuse(iq, out, service_unavailable("the service is shutting down"));
        };
        let sender = iq.from().map(|f| f.to_bare().to_string()).unwrap_or_default();
        let domain = iq.from().map(|f| f.domain().to_string()).unwrap_or_default();
        let svc = self.router.service();
        let (wait, unlimited) = match svc.admit(&sender, &sender) {
            Admission::Unlimited => (Duration::ZERO, true),
            Admission::After(wait) => (wait, false),
            Admission::Refuse => {
                tracing::debug!(%sender, "request refused: over the per-sender rate");
                return self.refuse(iq, out, resource_constraint("too many requests from you; slow down"));
            }
        };
        let this = self.clone();
        tokio::spawn(async move {
            let _done = done;
            // Wait for the sender's rate, then for a slot of its domain and one of the
            // service. A request still waiting when shutdown begins is answered at once.
            let admitted = async {
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
                let domain_slot = if unlimited { None } else { Some(this.domains.acquire(&domain).await) };
                Some((domain_slot, this.slots.clone().acquire_owned().await.ok()?))
            };
            let mut closing = this.closing.clone();
            let permits = tokio::select! {
                biased;
                permits = admitted => permits,
                _ = closing.wait_for(|c| *c) => {
                    this.refuse(iq, out, service_unavailable("the service is shutting down"));
                    return;
                }
            };
            let Some(_permits) = permits else { return };
            let started = std::time::Instant::now();
            if let Some(Served { kind, reply, then }) = this.router.handle_iq(iq).await {
                let outcome = match reply.error() {
                    Some(error) => minidom::Element::from(error.defined_condition.clone()).name().to_string(),
                    None => "ok".to_string(),
                };
                this.metrics.request(kind, outcome, started.elapsed());
                // On the replies' queue, right behind the reply it follows.
                if out.send(reply).await.is_ok()
                    && let Some(push) = then
                    && out.send(Reply::Push(push)).await.is_ok()
                {
                    this.metrics.pushes_sent.inc();
                }
            }
        });
    }

    /// Answers a get or set with an error without serving it.
    fn refuse(&self, iq: Iq, out: mpsc::Sender<Reply>, error: StanzaError) {
        if let Iq::Get { from: Some(from), id, .. } | Iq::Set { from: Some(from), id, .. } = iq {
            let me = Some(self.router.me().clone());
            let reply = Iq::Error { from: me, to: Some(from), id, error, payload: None };
            tokio::spawn(async move { out.send(reply.into()).await });
        }
    }
}

/// How long the dispatcher waits between asking again for unanswered discovery queries.
/// Short: with several instances on ejabberd each answer reaches the asker by chance
/// (one in two with two instances), so the search takes as many rounds as its unluckiest
/// query; a round is a handful of small iqs.
pub const DISCOVERY_RETRY: Duration = Duration::from_millis(500);
