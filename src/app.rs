//! Wiring: store, service, faces and the component link, run until SIGTERM or ctrl-c, then
//! shut down in stages (see [`crate::shutdown`]): stop taking requests and let those in
//! flight finish (bounded), fan out the changes they committed, close the stream, exit.

use crate::config::{Config, StoreBackend};
use crate::shutdown::Stage;
use anyhow::Context;
use feed::service::{Service, system_clock};
use feed::{Change, Store, ToPush};
use jid::Jid;
use metrics::Metrics;
use std::sync::Arc;
use std::time::Duration;
use store_postgres::PostgresStore;
use store_postgres::push_shards::Relay;
use store_sqlite::SqliteStore;
use tokio::sync::{mpsc, watch};
use xmpp::component::{self, LinkConfig, Outbound};
use xmpp::dispatch::{DISCOVERY_RETRY, Dispatcher, Parts};
use xmpp::multicast::LinkMulticast;
use xmpp::notify::{Notifier, change_sink};
use xmpp::router::Router;

/// Stanzas waiting to be written; a full queue makes handlers wait (backpressure).
const OUTBOUND_QUEUE: usize = 8192;
/// How long each shutdown stage waits for its tasks, then for the stream to close.
const DRAIN: Duration = Duration::from_secs(10);

/// Runs the component until SIGTERM or ctrl-c.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let config = Arc::new(config);
    let metrics = Arc::new(Metrics::new());
    // On PostgreSQL, pushes come from the shared push log (see `store_postgres::push_shards`),
    // which keeps each change until its pushes were written: the queue in memory holds one
    // batch, the most a crash can repeat.
    let shared = matches!(config.store.backend(), StoreBackend::Postgres(_));
    let backlog = if shared { store_postgres::push_shards::BATCH } else { config.push.backlog };
    let (change_tx, change_rx) = mpsc::channel(backlog);
    let weak_changes = change_tx.downgrade();
    let (linked_tx, linked_rx) = watch::channel(false);
    let m = metrics.clone();
    let observer: feed::ports::CommitObserver = Box::new(move |batch, took| m.commit(batch, took));
    // The store's one change sink feeds every face: XMPP pushes, and HTTP wake-ups when
    // the HTTP face runs. Each hands changes over without waiting.
    let wakeups = http::serving::Wakeups::new();
    let hub = http::hub::Registry::new();
    // Every commit of a SQLite store is this process's: feeds' generations are kept in
    // memory. On PostgreSQL other instances commit too: they are read from the store.
    let generations = match config.store.backend() {
        StoreBackend::Sqlite(_) => feed::generations::Generations::local(),
        StoreBackend::Postgres(_) => feed::generations::Generations::from_store(),
    };
    // Generations first: a change is validated (both faces keep answers by it) before
    // anyone is woken by it or told it is done.
    let mut sinks = vec![generations.sink()];
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
    let changes =
        Changes { rx: change_rx, weak: weak_changes, wakeups, wake_rx, hub, linked: linked_tx, share, generations };
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
                tokio::spawn(store_postgres::commit_notices::listen(url.to_string(), move |n| {
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
    rx: mpsc::Receiver<ToPush>,
    weak: mpsc::WeakSender<ToPush>,
    /// The HTTP face's long-poll and event-stream wake-ups, and their feed when it runs.
    wakeups: Arc<http::serving::Wakeups>,
    wake_rx: Option<mpsc::Receiver<Change>>,
    /// The WebSub hub's subscriptions, woken by the same changes.
    hub: Arc<http::hub::Registry>,
    /// Whether the link is up: an instance on PostgreSQL pushes only while it is.
    linked: watch::Sender<bool>,
    /// The feeds this instance pushes, when instances share the store.
    share: Option<watch::Receiver<feed::ports::Share>>,
    /// The feeds' change generations, which validate kept answers (XMPP pages, HTTP answers).
    generations: Arc<feed::generations::Generations>,
}

/// Serves the component over an open store until SIGTERM or ctrl-c: named steps, each
/// starting one part, then the staged shutdown.
async fn serve<S: Store>(config: Arc<Config>, store: S, metrics: Arc<Metrics>, changes: Changes) -> anyhow::Result<()> {
    let me = Jid::new(&config.component.jid).context("component.jid")?;
    let Changes { rx: change_rx, weak: weak_changes, wakeups, wake_rx, hub, linked, share, generations } = changes;
    if let Some(share) = share.clone() {
        tokio::spawn(report_shards(share, metrics.clone()));
    }
    let svc = Service::new(store, Arc::new(config.policy()), system_clock());
    svc.init().await.context("creating the configured feeds")?;
    tracing::info!(db = %config.store.describe(), feeds = config.feeds.len(), "store ready");

    let requests = Stage::new();
    let pushes = Stage::new();
    let mut link_cfg = LinkConfig::new(config.component.server.clone(), me.clone(), config.component.secret.clone());
    let multicast = Arc::new(LinkMulticast::new(config.push.multicast, me.clone(), link_cfg.ping_to.to_string()));
    let notifier = Arc::new(Notifier::new(svc.clone(), me.clone(), metrics.clone(), multicast.clone()));
    let (out_tx, out_rx) = mpsc::channel(OUTBOUND_QUEUE);
    let (push_tx, push_rx) = mpsc::channel(config.push.queue);
    if let Some(addr) = config.metrics.listen {
        let (replies, pushes) = (out_tx.downgrade(), push_tx.downgrade());
        let depths =
            move || [("replies", depth(&replies)), ("pushes", depth(&pushes)), ("changes", depth(&weak_changes))];
        start_metrics(addr, metrics.clone(), depths).await?;
    }
    let sources = start_sources(&config, &svc, &metrics, share.clone())?;
    let ready = Arc::new(xmpp::ready_pages::Ready::new(generations.clone()));
    if let (Some(_), Some(wake_rx)) = (&config.http, wake_rx) {
        let faces = HttpParts { wakeups, wake_rx, hub, share, sources, generations };
        start_http(&config, &svc, &metrics, faces, &requests).await?;
    }
    let (from_service, from_service_rx) = mpsc::unbounded_channel();
    let n = notifier.clone();
    let (signal, done) = (pushes.signal(), pushes.token());
    tokio::spawn(async move {
        let _done = done;
        n.run(change_rx, from_service_rx, push_tx, signal).await
    });
    let dispatcher = Dispatcher::new(Parts {
        router: Router::new(svc.clone(), me.clone(), ready),
        metrics,
        requests_per_domain: config.limits.requests_per_domain,
        notifier,
        multicast,
        from_service,
        out: out_tx,
        closing: requests.signal(),
        done: requests.token(),
        linked,
    });
    // A publish just over the payload limit must still arrive whole, to get its precise
    // `payload-too-big`; escaping can double an entry's size on the wire.
    link_cfg.limits.max_stanza_bytes =
        link_cfg.limits.max_stanza_bytes.max(2 * config.limits.max_payload_bytes + (64 << 10));
    let d = dispatcher.clone();
    let outbound = Outbound { replies: out_rx, pushes: push_rx };
    let mut link = spawn_link(component::run(link_cfg, outbound, requests.signal(), move |ev| d.on_inbound(ev)))?;
    let ask_again = tokio::spawn(ask_again(dispatcher.clone()));

    tokio::select! {
        _ = shutdown_signal() => tracing::info!("shutting down"),
        _ = &mut link => anyhow::bail!("the component link ended unexpectedly"),
    }
    // Requests: held HTTP requests answer now, WebSub progress is saved, XMPP requests in
    // flight finish (all bounded).
    if !requests.end(DRAIN).await {
        tracing::warn!("requests still in flight after {DRAIN:?}; closing anyway");
    }
    ask_again.abort();
    dispatcher.close();
    // Committed changes still waiting are fanned out; then the push queue closes too.
    if !pushes.end(DRAIN).await {
        tracing::warn!("pushes still being fanned out after {DRAIN:?}; closing anyway");
    }
    if tokio::time::timeout(DRAIN, link).await.is_err() {
        tracing::warn!("the stream did not close within {DRAIN:?}");
    }
    tracing::info!("stopped");
    Ok(())
}

/// Runs the XMPP link on a runtime of its own with one worker thread: the requests it reads
/// run there too (the dispatcher spawns them from the link's task), and the HTTP face keeps
/// the shared runtime. On the shared runtime a request moved between two workers at each step
/// (read, handled, committed, answered); on one worker the component spent 15-20% less CPU
/// per publish and published 8-10% faster through either server, pulls and pushes as fast
/// (BENCHMARKS.md, "A request typed once, and the XMPP link on a runtime of its own"). A
/// runtime of the current-thread kind was slower through Prosody: it runs a spawned request
/// only once the link's task yields, so a burst of requests reached the store only after the
/// whole burst was read. The receiver resolves when the link ends, or fails if it panicked.
fn spawn_link(link: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<tokio::sync::oneshot::Receiver<()>> {
    let (done, ended) = tokio::sync::oneshot::channel();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("xmpp-link")
        .enable_all()
        .build()
        .context("the XMPP link's runtime")?;
    std::thread::Builder::new()
        .name("xmpp-link-main".into())
        .spawn(move || {
            let link = rt.spawn(link);
            if rt.block_on(link).is_ok() {
                let _ = done.send(());
            }
        })
        .context("starting the XMPP link's thread")?;
    Ok(ended)
}

/// Serves `GET /metrics` at `addr`, with the depth of each queue read at every scrape.
async fn start_metrics<const N: usize>(
    addr: std::net::SocketAddr,
    metrics: Arc<Metrics>,
    depths: impl Fn() -> [(&'static str, usize); N] + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("metrics.listen {addr}"))?;
    tracing::info!(%addr, "metrics at http://{addr}/metrics");
    let refresh = move |m: &Metrics| {
        for (queue, depth) in depths() {
            m.queue_depth.get_or_create(&metrics::QueueLabel { queue }).set(depth as i64);
        }
    };
    tokio::spawn(metrics::serve(listener, metrics, Arc::new(refresh)));
    Ok(())
}

/// Starts one fetching task per configured source (SPEC §13). Where instances share the
/// store, each source is fetched by the instance that pushes its feed.
fn start_sources<S: Store>(
    config: &Config,
    svc: &Service<S>,
    metrics: &Arc<Metrics>,
    share: Option<watch::Receiver<feed::ports::Share>>,
) -> anyhow::Result<sources::Sources> {
    let list = config.feed_sources()?;
    if list.is_empty() {
        return Ok(sources::Sources::default());
    }
    tracing::info!(sources = list.len(), "fetching sources");
    let m = Arc::new(metrics.source.clone());
    // Subscribing to the sources' own hubs needs a public callback URL.
    let base = config.http.as_ref().and_then(|h| h.base_url.as_deref());
    sources::Sources::start(svc, list, &config.sources, &config.outbound, m, share, base)
        .map_err(|why| anyhow::anyhow!("starting the sources: {why}"))
}

/// What the HTTP face and the WebSub hub are woken by, and whom pings go to.
struct HttpParts {
    wakeups: Arc<http::serving::Wakeups>,
    wake_rx: mpsc::Receiver<Change>,
    hub: Arc<http::hub::Registry>,
    share: Option<watch::Receiver<feed::ports::Share>>,
    sources: sources::Sources,
    generations: Arc<feed::generations::Generations>,
}

/// Starts the HTTP face and the WebSub hub beside it, both ending with the `requests` stage.
async fn start_http<S: Store>(
    config: &Config,
    svc: &Service<S>,
    metrics: &Arc<Metrics>,
    parts: HttpParts,
    requests: &Stage,
) -> anyhow::Result<()> {
    let Some(http) = &config.http else { return Ok(()) };
    let HttpParts { wakeups, wake_rx, hub, share, sources, generations } = parts;
    let files = http::raise_open_files();
    let listener =
        tokio::net::TcpListener::bind(http.listen).await.with_context(|| format!("http.listen {}", http.listen))?;
    let settings = config.http_settings(http);
    let limits = http::serving::ConnectionLimits {
        max_connections: connection_cap(http.max_connections, files),
        header_timeout: std::time::Duration::from_secs(http.header_timeout),
    };
    // The configured bound, below the places the open-file limit leaves.
    let max_held = http
        .max_held
        .unwrap_or_else(|| http::serving::default_max_held(limits.max_connections))
        .min(limits.max_connections.saturating_sub(1));
    tracing::info!(addr = %http.listen, base = %settings.base, open_files = ?files, max_connections = limits.max_connections, max_held, "HTTP face listening");
    tokio::spawn(wakeups.clone().run(wake_rx));
    let hub = http::hub::Hub::new(
        svc.clone(),
        config.hub.clone(),
        &config.outbound,
        &settings.base,
        metrics.clone(),
        hub,
        share,
        requests.signal(),
    )
    .context("starting the WebSub hub")?;
    if let Some(subscriber) = sources.subscriber() {
        hub.on_source_callbacks(Arc::new(SourceHubs(subscriber)));
    }
    hub.on_ping(Arc::new(move |urls: &[String]| sources.ping(urls)));
    let hub_task = hub.start().await.context("loading the WebSub subscriptions")?;
    let done = requests.token();
    tokio::spawn(async move {
        let _done = done;
        // Deliveries stop where they are (unfinished ones come again after a restart); the
        // progress made so far is saved.
        let _ = hub_task.await;
    });
    let state = Arc::new(http::HttpState {
        svc: svc.clone(),
        settings,
        tokens: http::auth::Tokens::new(
            http.tokens.iter().map(|t| (t.token.clone(), crate::config::canonical_jid(&t.jid))),
        ),
        holds: http::serving::Holds::new(
            wakeups,
            http::serving::HeldPlaces::new(max_held),
            requests.signal(),
            metrics.clone(),
        ),
        flights: Default::default(),
        pulls: Default::default(),
        events: Default::default(),
        generations,
        answers: Default::default(),
        renders: Default::default(),
        metrics: metrics.clone(),
    });
    let (mut stop, done) = (requests.signal(), requests.token());
    tokio::spawn(async move {
        let _done = done;
        let stopped = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        http::serve(listener, state, hub.routes(), limits, stopped).await
    });
    Ok(())
}

/// The callbacks of the subscriptions to sources' hubs, as the HTTP face takes them (the
/// face and the producer know nothing of each other; this is where they meet).
struct SourceHubs(Arc<sources::websub::Subscriber>);

impl http::hub::source_callbacks::SourceCallbacks for SourceHubs {
    fn verify(&self, key: &str, mode: &str, topic: &str, lease: Option<u64>) -> bool {
        self.0.verify(key, mode, topic, lease)
    }

    fn deliver(&self, key: &str, signature: Option<&str>, body: &[u8]) {
        self.0.deliver(key, signature, body);
    }

    fn max_bytes(&self) -> usize {
        self.0.max_bytes()
    }
}

/// Open files kept for everything but HTTP connections: the store, the XMPP link, the
/// metrics endpoint, WebSub deliveries.
const FILES_KEPT: u64 = 512;

/// `[http] max_connections`, lowered (with a warning) to what the open-file limit allows:
/// past it accepting would fail instead of waiting.
fn connection_cap(configured: usize, open_files: Option<u64>) -> usize {
    let Some(files) = open_files else { return configured };
    let room = usize::try_from(files.saturating_sub(FILES_KEPT).max(1)).unwrap_or(usize::MAX);
    if configured > room {
        tracing::warn!(
            configured,
            open_files = files,
            cap = room,
            "http.max_connections is more than the open-file limit allows; lowered"
        );
    }
    configured.min(room)
}

/// Asks again, now and then, the multicast discovery queries still unanswered.
async fn ask_again<S: Store>(dispatcher: Arc<Dispatcher<S>>) {
    let mut every = tokio::time::interval(DISCOVERY_RETRY);
    every.tick().await;
    loop {
        every.tick().await;
        dispatcher.ask_again();
    }
}

/// Keeps the push-shards gauge current.
async fn report_shards(mut share: watch::Receiver<feed::ports::Share>, metrics: Arc<Metrics>) {
    loop {
        metrics.push_shards.set(share.borrow_and_update().shards.len() as i64);
        if share.changed().await.is_err() {
            return;
        }
    }
}

/// One change sink that hands every batch to each of `sinks` in turn.
fn fan_out(mut sinks: Vec<feed::ports::ChangeSink>) -> feed::ports::ChangeSink {
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

/// How many messages wait in a queue (0 once it is closed).
fn depth<T>(queue: &mpsc::WeakSender<T>) -> usize {
    queue.upgrade().map_or(0, |s| s.max_capacity() - s.capacity())
}

/// Resolves on SIGTERM or ctrl-c.
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
