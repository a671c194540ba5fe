//! The HTTP face's modes: no XMPP server in the middle, the tool talks to smartfeeds'
//! `[http]` listener directly.
//!
//! - `http-pull`: K walkers page through a view with `since`, as `pull` does over XMPP (the
//!   same ring, the same checks; see [`crate::pull`]).
//! - `http-publish`: PUT N Atom entries, K in flight (also how a large feed is filled).
//! - `http-longpoll`: N long-polls held on one view, then one publish: how long until the
//!   last of them is answered, and what holding them costs the service in memory.
//! - `http-fanout`: N event streams or long-polls held on one view, then P publishes: how
//!   long until the last subscriber has each, CPU per event, memory per held subscriber;
//!   the same against Nchan (`--target nchan`), the pub/sub server to compare with.
//! - `http-archive`: the recent and the oldest archive documents (and two between), each
//!   fetched many times: a deep document must cost what the recent one does.
//! - `websub`: many WebSub subscriptions to one view, callbacks served by the tool itself,
//!   then publishes: how long until the last delivery, and that every subscriber got every
//!   document once, in order.
//!
//! Runs report as their XMPP counterparts do (`pull`, `publish`), so `compare` puts HTTP and
//! XMPP figures of one host side by side.

mod archive;
mod fanout;
mod longpoll;
mod put_entries;
mod websub;

pub use crate::publish::EntryArgs as PublishArgs;
pub use archive::ArchiveArgs;
pub use fanout::FanoutArgs;
pub use longpoll::LongpollArgs;
pub use websub::WebsubArgs;

use std::time::{Duration, Instant};

use clap::Args;
use serde::Deserialize;

use crate::pull::{Pager, PullArgs};
use crate::report::Report;
use crate::stanzas::{PageAsk, PageFacts};
use crate::{RunOpts, pull};

/// What every HTTP mode needs.
#[derive(Args, Debug, Clone)]
pub struct HttpCommon {
    /// smartfeeds' HTTP base URL, as `[http] base_url` (loopback only).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub base: String,
    /// The feed.
    #[arg(long, default_value = "load")]
    pub feed: String,
    /// The view's parameters as a query string (e.g. `order=modified`); empty: the feed's
    /// own order.
    #[arg(long, default_value = "")]
    pub view: String,
    /// A bearer token (to publish, to read whitelist feeds, and to be exempt from the rate
    /// limit when it acts as an admin).
    #[arg(long)]
    pub token: Option<String>,
    /// How much, how long, what to watch.
    #[command(flatten)]
    pub run: RunOpts,
}

impl HttpCommon {
    /// Whether `--base` names a loopback host.
    pub fn is_loopback(&self) -> bool {
        let url = reqwest::Url::parse(&self.base).ok();
        url.as_ref().and_then(|u| u.host_str()).is_some_and(|h| {
            h == "localhost" || h.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
        })
    }
}

/// The HTTP modes.
pub enum Run {
    Pull(PullArgs),
    Publish(PublishArgs),
    Longpoll(LongpollArgs),
    Fanout(FanoutArgs),
    Archive(ArchiveArgs),
    Websub(WebsubArgs),
}

/// A run: the client, the options, and when to stop issuing work. Cheap to clone (the
/// client is shared).
#[derive(Clone)]
pub struct HttpCtx {
    pub client: reqwest::Client,
    pub common: HttpCommon,
    pub deadline: Instant,
}

impl HttpCtx {
    /// The feed's URL with the view's parameters and `extra` ones (`a=b&c=d`, or empty).
    pub fn feed_url(&self, extra: &str) -> String {
        let base = self.common.base.trim_end_matches('/');
        let query: Vec<&str> = [self.common.view.as_str(), extra].into_iter().filter(|s| !s.is_empty()).collect();
        let sep = if query.is_empty() { "" } else { "?" };
        format!("{base}/feeds/{}/{sep}{}", self.common.feed, query.join("&"))
    }

    /// A request with the token, if any.
    pub fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let rb = self.client.request(method, url);
        match &self.common.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    /// A report for `mode` with the run's settings.
    pub fn report(&self, mode: &str) -> Report {
        let mut r = self.common.run.report(mode);
        r.str("face", "http");
        r.str("feed", &self.common.feed);
        r.str("view", &self.common.view);
        r
    }
}

/// The JSON answer of a pull, as far as the walk needs it.
#[derive(Deserialize)]
struct PageJson {
    count: usize,
    #[serde(rename = "totalItems")]
    total: u64,
    last_cursor: Option<String>,
}

impl Pager for HttpCtx {
    async fn fetch(&self, ask: &PageAsk<'_>) -> (Duration, Result<PageFacts, String>) {
        let url = match ask {
            PageAsk::Rsm { max, after: None } => self.feed_url(&format!("max={max}")),
            PageAsk::Rsm { max, after: Some(a) } => self.feed_url(&format!("max={max}&since=cursor:{a}")),
            PageAsk::MaxItems(max) => self.feed_url(&format!("max={max}")),
            PageAsk::Mam { .. } => return (Duration::ZERO, Err("MAM is an XMPP query: no HTTP pull asks it".into())),
        };
        let t0 = Instant::now();
        let res = async {
            let res = self.request(reqwest::Method::GET, &url).send().await.map_err(kind)?;
            if !res.status().is_success() {
                return Err(format!("HTTP {}", res.status().as_u16()));
            }
            let bytes = res.bytes().await.map_err(kind)?;
            let page: PageJson = serde_json::from_slice(&bytes).map_err(|e| format!("bad JSON: {e}"))?;
            Ok(PageFacts { items: page.count, has_set: true, last: page.last_cursor, count: Some(page.total) })
        }
        .await;
        (t0.elapsed(), res)
    }

    fn node(&self) -> &str {
        &self.common.feed
    }

    fn open(&self) -> bool {
        Instant::now() < self.deadline
    }
}

/// A request failure as a short kind (for the error tally).
pub fn kind(e: reqwest::Error) -> String {
    if e.is_timeout() {
        "timeout".into()
    } else if e.is_connect() {
        "connect".into()
    } else {
        format!("request: {e}")
    }
}

/// Runs one HTTP mode.
pub async fn run(common: HttpCommon, mode: Run) -> Result<Report, String> {
    // Thousands of held requests are one socket each.
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let mut timeout = common.run.timeout;
    if let Run::Longpoll(a) = &mode {
        timeout = timeout.max(a.hold as f64 + 30.0);
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs_f64(timeout))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs_f64(common.run.duration);
    let ctx = HttpCtx { client, common, deadline };
    match mode {
        Run::Pull(args) if args.max_items => Err("--max-items is for XMPP services; HTTP pages by since".into()),
        Run::Pull(args) => {
            let report = ctx.report("pull");
            pull::measure(&ctx, &args, &ctx.common.run, report).await
        }
        Run::Publish(args) => put_entries::run(&ctx, &args).await,
        Run::Longpoll(args) => longpoll::run(&ctx, &args).await,
        Run::Fanout(args) => fanout::run(&ctx, &args).await,
        Run::Archive(args) => archive::run(&ctx, &args).await,
        Run::Websub(args) => websub::run(&ctx, &args).await,
    }
}
