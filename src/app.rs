//! Wiring: store, service, router and the component link, run until SIGTERM or ctrl-c, then
//! shut down in order: stop taking requests, let in-flight ones finish (bounded), close the
//! stream, exit.

use crate::component::{self, Inbound, LinkConfig, Outbound};
use crate::config::{Config, StoreBackend};
use crate::feed::service::{Service, system_clock};
use crate::feed::{Action, Change, Store};
use crate::limiter::{Admission, DomainSlots, Limiter};
use crate::metrics::Metrics;
use crate::store::postgres::PostgresStore;
use crate::store::postgres::relay::Relay;
use crate::store::sqlite::SqliteStore;
use crate::xmpp::errors::{resource_constraint, service_unavailable};
use crate::xmpp::multicast::{self, LinkMulticast};
use crate::xmpp::notify::{FromService, Notifier, change_sink};
use crate::xmpp::reply::Reply;
use crate::xmpp::router::{Router, Served};
use anyhow::Context;
use jid::Jid;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc, watch};
use xmpp_parsers::iq::Iq;
use xmpp_parsers::message::{Message, MessageType};
use xmpp_parsers::stanza::Stanza;
use xmpp_parsers::stanza_error::StanzaError;

/// Requests served at once; more wait for a slot (the link keeps reading meanwhile).
const MAX_IN_FLIGHT: u32 = 256;
/// Stanzas waiting to be written; a full queue makes handlers wait (backpressure).
const OUTBOUND_QUEUE: usize = 8192;
/// How long shutdown waits for in-flight requests, then for the stream to close.
const DRAIN: Duration = Duration::from_secs(10);
/// How often multicast discovery queries still unanswered are asked again.
const DISCOVERY_RETRY: Duration = Duration::from_secs(2);

/// Takes inbound stanzas from the link and serves each on its own task, so a slow store read
/// never blocks the connection loop.
struct Dispatcher<S: Store> {
    router: Router<S>,
    metrics: Arc<Metrics>,
    limiter: Limiter,
    /// Bounds one sender domain's share of `slots`.
    domains: DomainSlots,
    notifier: Arc<Notifier<S>>,
    /// The link's multicast service: found at each login, used by the notifier.
    multicast: Arc<LinkMulticast>,
    /// What the multicast service says (refusals, probe answers), to the notifier, which
    /// resends in order with its pushes.
    from_service: mpsc::UnboundedSender<FromService>,
    /// Taken away at shutdown, so the link sees the queue close once in-flight work is done.
    out: Mutex<Option<mpsc::Sender<Reply>>>,
    slots: Arc<Semaphore>,
    closing: AtomicBool,
    /// Set at shutdown, so requests waiting for their sender's rate are answered at once.
    closing_rx: watch::Receiver<bool>,
    /// Whether the link is up.
    linked: watch::Sender<bool>,
}

impl<S: Store> Dispatcher<S> {
    fn sender(&self) -> Option<mpsc::Sender<Reply>> {
        self.out.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn on_inbound(self: &Arc<Self>, event: Inbound) {
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
        let permanent = crate::xmpp::bounce::is_permanent(error.as_ref());
        tracing::debug!(%from, ?error, "push bounced");
        let notifier = self.notifier.clone();
        tokio::spawn(async move { notifier.bounced(&from, permanent).await });
    }

    fn on_iq(self: &Arc<Self>, iq: Iq) {
        let Some(out) = self.sender() else { return };
        if let Some(from) = iq.from() {
            self.notifier.alive(from);
        }
        if self.closing.load(Ordering::SeqCst) {
            return self.refuse(iq, out, service_unavailable("the service is shutting down"));
        }
        let sender = iq.from().map(|f| f.to_bare().to_string()).unwrap_or_default();
        let domain = iq.from().map(|f| f.domain().to_string()).unwrap_or_default();
        let unlimited = self.router.service().may(&sender, Action::Unlimited, "").is_ok();
        let wait = if unlimited {
            Duration::ZERO
        } else {
            match self.limiter.admit(&sender, std::time::Instant::now()) {
                Admission::After(wait) => wait,
                Admission::Refuse => {
                    tracing::debug!(%sender, "request refused: over the per-sender rate");
                    return self.refuse(iq, out, resource_constraint("too many requests from you; slow down"));
                }
            }
        };
        let this = self.clone();
        tokio::spawn(async move {
            // Wait for the sender's rate, then for a slot of its domain and one of the
            // service. A request still waiting when shutdown begins is answered at once:
            // shutdown takes every free slot, so it would never get one.
            let admitted = async {
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
                let domain_slot = if unlimited { None } else { Some(this.domains.acquire(&domain).await) };
                Some((domain_slot, this.slots.clone().acquire_owned().await.ok()?))
            };
            let mut closing = this.closing_rx.clone();
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
            if let Some(Served { kind, reply }) = this.router.handle_iq(iq).await {
                let outcome = match reply.error() {
                    Some(error) => minidom::Element::from(error.defined_condition.clone()).name().to_string(),
                    None => "ok".to_string(),
                };
                this.metrics.request(kind, outcome, started.elapsed());
                let _ = out.send(reply).await;
            }
        });
    }
}

impl<S: Store> Dispatcher<S> {
    /// Answers a get or set with an error without serving it.
    fn refuse(&self, iq: Iq, out: mpsc::Sender<Reply>, error: StanzaError) {
        if let Iq::Get { from: Some(from), id, .. } | Iq::Set { from: Some(from), id, .. } = iq {
            let me = Some(self.router.me().clone());
            let reply = Iq::Error { from: me, to: Some(from), id, error, payload: None };
            tokio::spawn(async move { out.send(reply.into()).await });
        }
    }
}

/// Runs the component until SIGTERM or ctrl-c.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let config = Arc::new(config);
    let metrics = Arc::new(Metrics::new());
    // On PostgreSQL, pushes come from the shared push log (see `store::postgres::relay`),
    // which keeps what waits: the queue in memory holds one batch, the most a crash can cost.
    let shared = matches!(config.store.backend(), StoreBackend::Postgres(_));
    let backlog = if shared { crate::store::postgres::relay::BATCH } else { config.push.backlog };
    let (change_tx, change_rx) = mpsc::channel(backlog);
    let weak_changes = change_tx.downgrade();
    let (linked_tx, linked_rx) = watch::channel(false);
    let m = metrics.clone();
    let observer: crate::feed::ports::CommitObserver = Box::new(move |batch, took| m.commit(batch, took));
    // The store's one change sink feeds every face: XMPP pushes, and HTTP wake-ups when
    // the HTTP face runs. Each hands changes over without waiting.
    let wakeups = crate::http::longpoll::Wakeups::new();
    let hub = crate::hub::Registry::new();
    let mut sinks = Vec::new();
    let wake_rx = config.http.as_ref().map(|_| {
        let (sink, rx) = wakeups.sink();
        sinks.push(sink);
        rx
    });
    let relay = match config.store.backend() {
        // Pushes of both kinds, for the feeds this instance holds, whoever committed them.
        StoreBackend::Postgres(url) => {
            let relay = Relay::new(url, change_tx, linked_rx).map_err(|why| anyhow::anyhow!("store.url: {why}"))?;
            Some(if config.http.is_some() { relay.also(hub.sink()) } else { relay })
        }
        // This process's own commits are all there is to push.
        StoreBackend::Sqlite(_) => {
            sinks.push(change_sink(change_tx, metrics.clone()));
            if config.http.is_some() {
                sinks.push(hub.sink());
            }
            None
        }
    };
    let share = relay.as_ref().map(Relay::share);
    let sink = fan_out(sinks);
    let changes = Changes { rx: change_rx, weak: weak_changes, wakeups, wake_rx, hub, linked: linked_tx, share };
    match config.store.backend() {
        StoreBackend::Sqlite(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            }
            // One process per SQLite file; PostgreSQL is made for several.
            let _lock = lock_database(path)?;
            let path = path.to_path_buf();
            // Opening may migrate a large database: never on an async worker.
            let store =
                tokio::task::spawn_blocking(move || SqliteStore::open_observed(&path, Some(sink), Some(observer)))
                    .await
                    .context("opening the store")?
                    .with_context(|| format!("opening the store {}", config.store.describe()))?;
            serve(config, store, metrics, changes).await
        }
        StoreBackend::Postgres(url) => {
            let store = PostgresStore::connect_observed(url, Some(sink), Some(observer))
                .await
                .with_context(|| format!("opening the store {}", config.store.describe()))?;
            // After the store has migrated: the relay reads the push log.
            if let Some(relay) = relay {
                tokio::spawn(relay.run());
            }
            // Held HTTP requests wake for commits of other instances too.
            if config.http.is_some() {
                let (me, wakeups) = (store.instance(), changes.wakeups.clone());
                tokio::spawn(crate::store::postgres::notices::listen(url.to_string(), move |n| {
                    if n.instance == me {
                        return;
                    }
                    match n.feeds {
                        Some(feeds) => feeds.iter().for_each(|f| wakeups.wake_feed(Some(f))),
                        None => wakeups.wake_feed(None),
                    }
                }));
            }
            let out = serve(config, store.clone(), metrics, changes).await;
            store.close().await;
            out
        }
    }
}

/// The store's committed changes on their way to the pushes, and a handle to measure the
/// queue without keeping it open.
struct Changes {
    rx: mpsc::Receiver<Change>,
    weak: mpsc::WeakSender<Change>,
    /// The HTTP face's long-poll and event-stream wake-ups, and their feed when it runs.
    wakeups: Arc<crate::http::longpoll::Wakeups>,
    wake_rx: Option<mpsc::Receiver<Change>>,
    /// The WebSub hub's subscriptions, woken by the same changes.
    hub: Arc<crate::hub::Registry>,
    /// Whether the link is up: an instance on PostgreSQL pushes only while it is.
    linked: watch::Sender<bool>,
    /// The feeds this instance pushes, when instances share the store.
    share: Option<watch::Receiver<crate::feed::ports::Share>>,
}

/// Serves the component over an open store until SIGTERM or ctrl-c.
async fn serve<S: Store>(config: Arc<Config>, store: S, metrics: Arc<Metrics>, changes: Changes) -> anyhow::Result<()> {
    let me = Jid::new(&config.component.jid).context("component.jid")?;
    let Changes { rx: change_rx, weak: weak_changes, wakeups, wake_rx, hub, linked, share } = changes;
    if let Some(mut share) = share.clone() {
        let m = metrics.clone();
        tokio::spawn(async move {
            loop {
                m.push_shards.set(share.borrow_and_update().shards.len() as i64);
                if share.changed().await.is_err() {
                    return;
                }
            }
        });
    }
    let svc = Service::new(store, Arc::new(config.policy()), system_clock());
    let mut link_cfg = LinkConfig::new(config.component.server.clone(), me.clone(), config.component.secret.clone());
    let multicast = Arc::new(LinkMulticast::new(config.push.multicast, me.clone(), link_cfg.ping_to.to_string()));
    let notifier = Arc::new(Notifier::new(svc.clone(), me.clone(), metrics.clone(), multicast.clone()));
    svc.init().await.context("creating the configured feeds")?;
    tracing::info!(db = %config.store.describe(), feeds = config.feeds.len(), "store ready");

    let (out_tx, out_rx) = mpsc::channel(OUTBOUND_QUEUE);
    let (push_tx, push_rx) = mpsc::channel(config.push.queue);
    if let Some(addr) = config.metrics.listen {
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("metrics.listen {addr}"))?;
        tracing::info!(%addr, "metrics at http://{addr}/metrics");
        let (replies, pushes) = (out_tx.downgrade(), push_tx.downgrade());
        let refresh = move |m: &Metrics| {
            let depths = [("replies", depth(&replies)), ("pushes", depth(&pushes)), ("changes", depth(&weak_changes))];
            for (queue, depth) in depths {
                m.queue_depth.get_or_create(&crate::metrics::QueueLabel { queue }).set(depth as i64);
            }
        };
        tokio::spawn(crate::metrics::serve(listener, metrics.clone(), Arc::new(refresh)));
    }
    let (http_stop_tx, http_stop_rx) = watch::channel(false);
    let (hub_stop_tx, hub_stop_rx) = watch::channel(false);
    let mut http_task = None;
    let mut hub_task = None;
    if let (Some(http), Some(wake_rx)) = (&config.http, wake_rx) {
        let files = crate::http::raise_open_files();
        let listener =
            tokio::net::TcpListener::bind(http.listen).await.with_context(|| format!("http.listen {}", http.listen))?;
        let settings = crate::http::Settings::from_config(http);
        tracing::info!(addr = %http.listen, base = %settings.base, open_files = ?files, "HTTP face listening");
        tokio::spawn(wakeups.clone().run(wake_rx));
        let hub = crate::hub::Hub::new(
            svc.clone(),
            config.hub.clone(),
            &settings.base,
            metrics.clone(),
            hub,
            share,
            hub_stop_rx,
        )
        .context("starting the WebSub hub")?;
        hub_task = Some(hub.start().await.context("loading the WebSub subscriptions")?);
        let state = Arc::new(crate::http::HttpState {
            svc: svc.clone(),
            settings,
            tokens: crate::http::auth::Tokens::new(
                http.tokens.iter().map(|t| (t.token.clone(), crate::config::canonical_jid(&t.jid))),
            ),
            wakeups: wakeups.clone(),
            flights: Arc::default(),
            limiter: Limiter::new(
                config.limits.requests_per_second,
                config.limits.request_burst,
                config.limits.request_backlog,
            ),
            metrics: metrics.clone(),
            closing: http_stop_rx.clone(),
            hub,
        });
        let mut stop = http_stop_rx.clone();
        let stopped = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        http_task = Some(tokio::spawn(crate::http::serve(listener, state, stopped)));
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let n = notifier.clone();
    let (from_service, from_service_rx) = mpsc::unbounded_channel();
    let fanout = tokio::spawn(async move { n.run(change_rx, from_service_rx, push_tx, stop_rx).await });
    let (closing_tx, closing_rx) = watch::channel(false);
    let dispatcher = Arc::new(Dispatcher {
        router: Router::new(svc, me.clone()),
        limiter: Limiter::new(
            config.limits.requests_per_second,
            config.limits.request_burst,
            config.limits.request_backlog,
        ),
        domains: DomainSlots::new(config.limits.requests_per_domain),
        metrics,
        notifier,
        multicast,
        from_service,
        out: Mutex::new(Some(out_tx)),
        slots: Arc::new(Semaphore::new(MAX_IN_FLIGHT as usize)),
        closing: AtomicBool::new(false),
        closing_rx: closing_rx.clone(),
        linked,
    });
    // A publish just over the payload limit must still arrive whole, to get its precise
    // `payload-too-big`; escaping can double an entry's size on the wire.
    link_cfg.limits.max_stanza_bytes =
        link_cfg.limits.max_stanza_bytes.max(2 * config.limits.max_payload_bytes + (64 << 10));
    let d = dispatcher.clone();
    let outbound = Outbound { replies: out_rx, pushes: push_rx };
    let mut link = tokio::spawn(component::run(link_cfg, outbound, closing_rx, move |ev| d.on_inbound(ev)));
    // Discovery answers that went astray (to another instance of the domain) are asked for
    // again.
    let d = dispatcher.clone();
    let ask_again = tokio::spawn(async move {
        let mut every = tokio::time::interval(DISCOVERY_RETRY);
        every.tick().await;
        loop {
            every.tick().await;
            d.send_iqs(d.multicast.ask_again());
        }
    });

    tokio::select! {
        _ = shutdown_signal() => tracing::info!("shutting down"),
        _ = &mut link => anyhow::bail!("the component link ended unexpectedly"),
    }
    dispatcher.closing.store(true, Ordering::SeqCst);
    let _ = closing_tx.send(true);
    // Held HTTP requests answer now; those in flight finish (bounded).
    let _ = http_stop_tx.send(true);
    if let Some(task) = http_task
        && tokio::time::timeout(DRAIN, task).await.is_err()
    {
        tracing::warn!("HTTP requests still open after {DRAIN:?}; closing anyway");
    }
    // Deliveries stop where they are (unfinished ones come again after a restart); the
    // progress made so far is saved.
    let _ = hub_stop_tx.send(true);
    if let Some(task) = hub_task
        && tokio::time::timeout(DRAIN, task).await.is_err()
    {
        tracing::warn!("WebSub progress not saved within {DRAIN:?}; some documents will come again");
    }
    if tokio::time::timeout(DRAIN, dispatcher.slots.acquire_many(MAX_IN_FLIGHT)).await.is_err() {
        tracing::warn!("requests still in flight after {DRAIN:?}; closing anyway");
    }
    ask_again.abort();
    dispatcher.out.lock().unwrap_or_else(|p| p.into_inner()).take();
    // Committed changes still waiting are fanned out; then the push queue closes too.
    let _ = stop_tx.send(true);
    if tokio::time::timeout(DRAIN, fanout).await.is_err() {
        tracing::warn!("pushes still being fanned out after {DRAIN:?}; closing anyway");
    }
    if tokio::time::timeout(DRAIN, link).await.is_err() {
        tracing::warn!("the stream did not close within {DRAIN:?}");
    }
    tracing::info!("stopped");
    Ok(())
}

/// One change sink that hands every batch to each of `sinks` in turn.
fn fan_out(mut sinks: Vec<crate::feed::ports::ChangeSink>) -> crate::feed::ports::ChangeSink {
    Box::new(move |changes| {
        if let Some((last, rest)) = sinks.split_last_mut() {
            for sink in rest {
                sink(changes.clone());
            }
            last(changes);
        }
    })
}

/// Takes an exclusive lock beside the database for the life of the process.
///
/// Two processes on one database would both stamp items from their own view of the feed's
/// clock and sequences, and each would push only its own changes; ejabberd even accepts
/// both as connections of one component. So a second process is refused, clearly.
fn lock_database(db: &std::path::Path) -> anyhow::Result<std::fs::File> {
    let mut path = db.as_os_str().to_owned();
    path.push(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening the lock file {}", std::path::Path::new(&path).display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => {
            anyhow::bail!("another smartfeeds process is using {} (run one process per database)", db.display())
        }
        Err(std::fs::TryLockError::Error(e)) => Err(e).context("locking the database"),
    }
}

/// Resolves on SIGTERM or ctrl-c.
/// How many messages wait in a queue (0 once it is closed).
fn depth<T>(queue: &mpsc::WeakSender<T>) -> usize {
    queue.upgrade().map_or(0, |s| s.max_capacity() - s.capacity())
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await
            }
        }
    };
    tokio::select! {
        _ = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
